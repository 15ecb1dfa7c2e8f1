"""Adapter between Tidelog and etcd (``aetcd``): JSON values, leases, guarded writes, watches.

Services never build keys here (``keys.Keys`` does) and never talk to aetcd
directly; this module turns etcd's primitives into the few operations the
services need:

* ``register``: an ephemeral key on a lease kept alive by a background task;
  re-created under a fresh lease if the old one expired (e.g. after a pause).
* ``guarded_txn``: writes that only apply while a compare holds (the
  controller's fencing).
* ``watch_prefix``: calls back with a fresh snapshot of a prefix whenever it
  changes, reconnecting after errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aetcd
import aetcd.client
import aetcd.rpc
import aetcd.watcher

from shared.metadata.keys import Keys, prefix_end
from shared.security.transport import TlsFiles, channel_credentials

log = logging.getLogger(__name__)

Snapshot = dict[bytes, tuple[Any, int, int]]  # key -> (value, create_revision, mod_revision)
#: After a failed lease refresh, the next attempt comes this soon (the lease outlives ~3 intervals).
KEEPALIVE_RETRY_S = 0.2


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def loads(data: bytes) -> Any:
    return json.loads(data)


@dataclass
class Registration:
    """An ephemeral key kept alive in the background."""

    key: bytes
    value: Any
    ttl: int
    lease: aetcd.Lease | None = None
    task: asyncio.Task[None] | None = None
    renewals: int = 0
    on_lost: Callable[[], None] | None = None


class PlainClient(aetcd.Client):
    """aetcd's client with no timeout on creating a watch. aetcd's ``Watcher`` matches "created" answers to
    the one pending create: when a create times out under load and its answer comes late, that answer is
    taken for the *next* watch's create, which then follows a cancelled watch id and never sees an event
    (seen: the ACL watch went deaf after the users watch timed out). Without the timeout a create waits for
    its own answer; a broken stream still ends it with an error, and ``_watch_loop`` starts over."""

    async def connect(self) -> None:
        await super().connect()
        if self._watcher is not None:
            self._watcher._timeout = None


class TlsClient(aetcd.Client):
    """aetcd's client over TLS with a client certificate (etcd's ``--client-cert-auth``): aetcd 1.0's
    ``connect`` always opens an insecure channel, so this one builds the secure channel itself and
    otherwise does what aetcd's does (no etcd user/password auth: the certificate is the credential)."""

    def __init__(self, *args: Any, tls: TlsFiles, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tls = tls

    @aetcd.client._handle_errors
    async def connect(self) -> None:
        if self._connected.is_set():
            return
        if self._is_connecting:
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        try:
            self._is_connecting = True
            target = f"{self._host}:{self._port}"
            # read the files now: a rotated certificate applies from the next connection on
            self.channel = aetcd.rpc.secure_channel(target, channel_credentials(self.tls),
                                                    options=list(self._options.items()))
            self.kvstub = aetcd.rpc.KVStub(self.channel)
            self.clusterstub = aetcd.rpc.ClusterStub(self.channel)
            self.leasestub = aetcd.rpc.LeaseStub(self.channel)
            self.maintenancestub = aetcd.rpc.MaintenanceStub(self.channel)
            self._watcher = aetcd.watcher.Watcher(aetcd.rpc.WatchStub(self.channel), timeout=None,
                                                  metadata=self.metadata)  # see PlainClient
            self._connected.set()
        finally:
            self._is_connecting = False


class MetadataStore:
    def __init__(self, endpoint: tuple[str, int], cluster: str, timeout: int = 5, tls: TlsFiles | None = None) -> None:
        self.host, self.port = endpoint
        self.keys = Keys(cluster)
        self.tls = tls
        self.client = (PlainClient(host=self.host, port=self.port, timeout=timeout) if tls is None
                       else TlsClient(host=self.host, port=self.port, timeout=timeout, tls=tls))
        self._tasks: set[asyncio.Task[Any]] = set()
        self._registrations: list[Registration] = []

    async def connect(self, wait_s: float = 30.0) -> None:
        """Connect, retrying until etcd answers or ``wait_s`` passes."""
        deadline = asyncio.get_running_loop().time() + wait_s
        while True:
            try:
                await self.client.connect()
                await self.client.get(self.keys.cluster_id())
                return
            except Exception as exc:  # connection errors come in several aetcd types
                if asyncio.get_running_loop().time() > deadline:
                    raise ConnectionError(f"etcd at {self.host}:{self.port} unreachable: {exc}") from exc
                await asyncio.sleep(0.2)

    async def close(self) -> None:
        """Stop background tasks, revoke leases (so others see us leave at once), disconnect.

        Every step is bounded: a shutdown must never hang on etcd."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2)
        for reg in self._registrations:
            if reg.lease is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(reg.lease.revoke(), 2)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.client.close(), 2)

    def spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- plain reads and writes -------------------------------------------------------

    async def get(self, key: bytes) -> tuple[Any, int, int] | None:
        kv = await self.client.get(key)
        if kv is None:
            return None
        return loads(kv.value), kv.create_revision, kv.mod_revision

    async def get_prefix(self, prefix: bytes) -> Snapshot:
        out: Snapshot = {}
        for kv in await self.client.get_prefix(prefix):
            try:
                out[kv.key] = (loads(kv.value), kv.create_revision, kv.mod_revision)
            except ValueError:
                log.warning("ignoring non-JSON value", extra={"key": kv.key.decode(errors="replace")})
        return out

    async def put(self, key: bytes, value: Any, lease: aetcd.Lease | None = None) -> None:
        await self.client.put(key, dumps(value), lease=lease)

    async def create(self, key: bytes, value: Any, lease: aetcd.Lease | None = None) -> tuple[bool, int]:
        """Create ``key`` if absent. Returns ``(created, create_revision_of_existing_or_new)``."""
        t = self.client.transactions
        ok, _ = await self.client.transaction(
            compare=[t.create(key) == 0],
            success=[t.put(key, dumps(value), lease=lease)],
            failure=[],
        )
        kv = await self.client.get(key)
        return ok, (kv.create_revision if kv is not None else 0)

    async def guarded_txn(
        self, guard_key: bytes, guard_create_revision: int, ops: list[Any], compares: list[Any] | None = None
    ) -> bool:
        """Apply ``ops`` only if ``guard_key`` still exists with that create revision (fencing)
        and every extra compare holds."""
        t = self.client.transactions
        ok, _ = await self.client.transaction(
            compare=[t.create(guard_key) == guard_create_revision, *(compares or [])],
            success=ops,
            failure=[],
        )
        return bool(ok)

    async def delete_if_created(self, key: bytes, create_revision: int) -> bool:
        """Delete ``key`` only if it is still the one created at ``create_revision``."""
        t = self.client.transactions
        ok, _ = await self.client.transaction(
            compare=[t.create(key) == create_revision], success=[t.delete(key)], failure=[]
        )
        return bool(ok)

    def cmp_absent(self, key: bytes) -> Any:
        return self.client.transactions.create(key) == 0

    def cmp_create_revision(self, key: bytes, revision: int) -> Any:
        return self.client.transactions.create(key) == revision

    def cmp_mod_revision(self, key: bytes, revision: int) -> Any:
        return self.client.transactions.mod(key) == revision

    async def allocate_block(self, key: bytes, size: int) -> int:
        """Atomically take ``size`` ids from the counter at ``key``; return the first."""
        t = self.client.transactions
        while True:
            kv = await self.client.get(key)
            current = loads(kv.value)["next"] if kv is not None else 0
            guard = (t.mod(key) == kv.mod_revision) if kv is not None else (t.create(key) == 0)
            ok, _ = await self.client.transaction(
                compare=[guard], success=[t.put(key, dumps({"next": current + size}))], failure=[]
            )
            if ok:
                return current

    def op_put(self, key: bytes, value: Any, lease: aetcd.Lease | None = None) -> Any:
        return self.client.transactions.put(key, dumps(value), lease=lease)

    def op_delete(self, key: bytes, prefix: bool = False) -> Any:
        return self.client.transactions.delete(key, range_end=prefix_end(key) if prefix else None)

    # -- leases ---------------------------------------------------------------------------

    async def lease(self, ttl: int) -> aetcd.Lease:
        return await self.client.lease(ttl)

    async def refresh(self, lease: aetcd.Lease) -> bool:
        """Refresh a lease; False if it no longer exists (expired)."""
        reply = await lease.refresh()
        return reply is not None and reply.TTL > 0

    async def register(self, key: bytes, value: Any, ttl: int, on_lost: Callable[[], None] | None = None) -> Registration:
        """Put ``key`` on a lease and keep it alive until ``close()``.

        ``on_lost`` runs when the lease is found expired (before registering again)."""
        reg = Registration(key, value, ttl, on_lost=on_lost)
        await self._grant_and_put(reg)
        reg.task = self.spawn(self._keep_alive(reg), f"keepalive {key.decode()}")
        self._registrations.append(reg)
        return reg

    async def _grant_and_put(self, reg: Registration) -> None:
        reg.lease = await self.client.lease(reg.ttl)
        await self.client.put(reg.key, dumps(reg.value), lease=reg.lease)

    async def _keep_alive(self, reg: Registration) -> None:
        """Refresh every ttl/3. Each refresh is bounded by ttl/3 and a failed one is retried at once
        (not a whole interval later), so one slow answer does not cost the lease; a refresh that
        starts late (a busy event loop) or answers slowly is logged with its timings."""
        loop = asyncio.get_running_loop()
        interval = max(reg.ttl / 3, 0.3)
        delay = interval
        while True:
            due = loop.time() + delay
            await asyncio.sleep(delay)
            started = loop.time()
            delay = interval
            try:
                assert reg.lease is not None
                alive = await asyncio.wait_for(self.refresh(reg.lease), interval)
                took = loop.time() - started
                if started - due > interval / 2 or took > interval / 2:
                    log.warning("lease keep-alive slow", extra={"key": reg.key.decode(), "late_s": round(started - due, 2),
                                                                "refresh_s": round(took, 2)})
                if alive:
                    reg.renewals += 1
                    continue
                log.warning("lease expired, registering again", extra={"key": reg.key.decode()})
                if reg.on_lost is not None:
                    reg.on_lost()
                await self._grant_and_put(reg)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("lease keep-alive failed", extra={"key": reg.key.decode(), "error": repr(exc),
                                                              "late_s": round(started - due, 2)})
                delay = KEEPALIVE_RETRY_S

    async def update_registration(self, reg: Registration, value: Any) -> None:
        reg.value = value
        await self.client.put(reg.key, dumps(value), lease=reg.lease)

    # -- watches ------------------------------------------------------------------------------

    def watch_prefix(
        self, prefix: bytes, on_change: Callable[[Snapshot], Awaitable[None] | None], name: str = "watch"
    ) -> asyncio.Task[None]:
        """Call ``on_change(snapshot)`` now and after every change under ``prefix``, forever."""
        return self.spawn(self._watch_loop(prefix, on_change), f"{name} {prefix.decode()}")

    async def _watch_loop(self, prefix: bytes, on_change: Callable[[Snapshot], Awaitable[None] | None]) -> None:
        while True:
            watch = None
            refresher = None
            try:
                snapshot = await self.get_prefix(prefix)
                rev = max((m for _, _, m in snapshot.values()), default=0)
                await _maybe_await(on_change(snapshot))
                watch = await self.client.watch_prefix(prefix, start_revision=rev + 1 if rev else None)
                # Events only mark the prefix dirty; one task re-reads it. A burst (a transaction of
                # 120 puts, a 10,000-partition topic written in chunks) costs a few reads, not one each.
                dirty = asyncio.Event()
                refresher = asyncio.ensure_future(self._refresh_when_dirty(prefix, dirty, on_change))
                if not rev:
                    # Started at "now" on an empty prefix: keys created between the read and the
                    # watch would be missed (their events predate it), so read once more.
                    dirty.set()
                async for _event in watch:
                    dirty.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("watch failed, reconnecting", extra={"prefix": prefix.decode(), "error": str(exc)})
                await asyncio.sleep(0.5)
            finally:
                if refresher is not None:
                    refresher.cancel()
                if watch is not None:
                    with contextlib.suppress(BaseException):
                        await asyncio.wait_for(watch.cancel(), 1)

    async def _refresh_when_dirty(self, prefix: bytes, dirty: asyncio.Event,
                                  on_change: Callable[[Snapshot], Awaitable[None] | None]) -> None:
        while True:
            await dirty.wait()
            dirty.clear()
            try:
                await _maybe_await(on_change(await self.get_prefix(prefix)))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("watch refresh failed, retrying", extra={"prefix": prefix.decode(), "error": str(exc)})
                await asyncio.sleep(0.5)
                dirty.set()


async def _maybe_await(result: Awaitable[None] | None) -> None:
    if result is not None:
        await result


async def compare_and_swap(store: MetadataStore, key: bytes, mod_revision: int | None, value: Any | None) -> bool:
    """Put ``value`` at ``key`` (delete it when None) only if the key is still at ``mod_revision``
    (absent when None). False if someone changed it in between."""
    t = store.client.transactions
    guard = (t.mod(key) == mod_revision) if mod_revision is not None else (t.create(key) == 0)
    op = t.delete(key) if value is None else t.put(key, dumps(value))
    ok, _ = await store.client.transaction(compare=[guard], success=[op], failure=[])
    return bool(ok)
