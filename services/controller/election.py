"""Controller election and fencing on etcd.

Exactly one controller is active: the one whose key ``/controller`` exists on
its lease. The key's ``create_revision`` is the controller epoch, strictly
higher for every newly elected controller because etcd revisions only grow.
Every metadata write the active controller makes goes through ``write()``, an
etcd transaction that applies only while the controller key still has the
writer's create revision, so a controller that lost its lease (killed,
paused, partitioned) can never overwrite a newer controller's decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared.errors import ConflictError, FencedError
from shared.metadata.store import MetadataStore
from shared.netprobe import tcp_probe_async

log = logging.getLogger(__name__)


@dataclass
class ControllerIdentity:
    id: int
    address: str
    rest: str


class ControllerElection:
    def __init__(
        self,
        store: MetadataStore,
        me: ControllerIdentity,
        ttl_s: int,
        tick_s: float = 0.5,
        on_change: Callable[[bool, int], None] | None = None,
    ) -> None:
        self.store = store
        self.me = me
        self.ttl_s = ttl_s
        self.tick_s = tick_s
        self.on_change = on_change
        self.epoch = 0  # 0 while standby
        self.on_txn: Callable[[float, bool], None] | None = None  # (seconds, succeeded): etcd txn metrics
        self._lease: Any = None
        self._lost = asyncio.Event()

    @property
    def active(self) -> bool:
        return self.epoch > 0

    async def write(self, ops: list[Any], compares: list[Any] | None = None, conflict: str = "") -> None:
        """Apply ``ops`` in one transaction fenced by this controller's epoch.

        Extra ``compares`` guard against concurrent changes; when only they fail,
        ``ConflictError`` is raised and the controller keeps its role.
        """
        if not self.active:
            raise FencedError("not the active controller")
        started = time.monotonic()
        try:
            ok = await self.store.guarded_txn(self.store.keys.controller(), self.epoch, ops, compares)
        except Exception:
            if self.on_txn is not None:
                self.on_txn(time.monotonic() - started, False)
            raise
        if self.on_txn is not None:
            self.on_txn(time.monotonic() - started, ok)
        if not ok and compares:
            current = await self.store.get(self.store.keys.controller())
            if current is not None and current[1] == self.epoch:
                raise ConflictError(conflict or "metadata changed concurrently")
        if not ok:
            log.warning("fenced: write refused, stepping down", extra={"epoch": self.epoch})
            self._lost.set()
            raise FencedError(f"controller epoch {self.epoch} is no longer current")

    async def run(self) -> None:
        """Campaign forever: standby until the key is free, active until the lease is lost."""
        key = self.store.keys.controller()
        while True:
            try:
                self._lease = await self.store.lease(self.ttl_s)
                created, rev = await self.store.create(
                    key, {"id": self.me.id, "address": self.me.address, "rest": self.me.rest}, self._lease
                )
                if created:
                    await self._be_active(rev)
                else:
                    with contextlib.suppress(Exception):
                        await self._lease.revoke()
                    self._lease = None
                    await self._wait_for_vacancy()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("election round failed", extra={"error": str(exc)})
                await asyncio.sleep(self.tick_s)

    async def _wait_for_vacancy(self) -> None:
        """Until the controller key is gone: its lease expired, or the holder crashed.

        A crashed holder's lease lives on for the session timeout; its gRPC port refusing
        connections twice in a row tells at once (a paused process still accepts them), and the
        key it created is deleted, guarded by its create revision (its epoch)."""
        key = self.store.keys.controller()
        refusals = 0
        while (got := await self.store.get(key)) is not None:
            holder, epoch, _ = got
            address = holder.get("address", "") if isinstance(holder, dict) else ""
            refused = bool(address) and await tcp_probe_async(address, 0.2) == "refused"
            refusals = refusals + 1 if refused else 0
            if refusals >= 2:
                if await self.store.delete_if_created(key, epoch):
                    log.info("active controller's port refuses connections: its key is removed",
                             extra={"holder": holder.get("id"), "epoch": epoch})
                return
            await asyncio.sleep(self.tick_s / 2)

    async def _be_active(self, epoch: int) -> None:
        self.epoch = epoch
        self._lost.clear()
        log.info("became active controller", extra={"epoch": epoch})
        if self.on_change:
            self.on_change(True, epoch)
        keepalive = asyncio.create_task(self._keep_lease(epoch), name="controller lease keepalive")
        try:
            while not self._lost.is_set():
                try:
                    # Heartbeat through the fence first: after a pause this is the first thing that runs.
                    # (asyncio.timeout, not wait_for: Python 3.11's wait_for returns the inner result when a
                    # cancel arrives as it completes, and this loop then outlived its task's cancel.)
                    async with asyncio.timeout(self.ttl_s):
                        await self.write(
                            [self.store.op_put(self.store.keys.controller_heartbeat(),
                                               {"id": self.me.id, "epoch": epoch, "time_ms": int(time.time() * 1000)})])
                except FencedError:
                    raise
                except Exception as exc:  # TimeoutError included
                    # etcd slow to answer or briefly unreachable: every write stays fenced by the epoch, and
                    # the lease's own task decides when the role is lost.
                    log.warning("controller heartbeat failed, retrying",
                                extra={"epoch": epoch, "error": str(exc) or type(exc).__name__})
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.tick_s):
                        await self._lost.wait()
        except FencedError:
            pass
        finally:
            keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keepalive
            self.epoch = 0
            if self.on_change:
                self.on_change(False, epoch)
            log.info("no longer active controller", extra={"epoch": epoch})

    async def _keep_lease(self, epoch: int) -> None:
        """Refresh the controller's lease every third of the session timeout, on its own: a slow heartbeat
        write (etcd's fsync on a loaded disk) no longer delays the refresh until the lease expires. A
        refresh is bounded by that interval and a failed one is tried again at once; the role is given up
        (``_lost``) when the lease is gone, or when no refresh has succeeded for the session timeout
        (stepping down at a transient error would leave the cluster without a controller until this
        controller's own key expired)."""
        interval = max(self.ttl_s / 3, 0.3)
        last_ok = time.monotonic()
        next_try = last_ok + interval
        while not self._lost.is_set():
            await asyncio.sleep(max(0.0, next_try - time.monotonic()))
            try:
                async with asyncio.timeout(interval):
                    alive = await self.store.refresh(self._lease)
            except Exception as exc:  # TimeoutError included
                error = str(exc) or type(exc).__name__
                if time.monotonic() - last_ok >= self.ttl_s:
                    log.warning("etcd unreachable for the session timeout, stepping down",
                                extra={"epoch": epoch, "error": error})
                    self._lost.set()
                    return
                log.warning("controller lease refresh failed, retrying", extra={"epoch": epoch, "error": error})
                next_try = time.monotonic() + min(0.1, interval)
                continue
            if not alive:
                log.warning("controller lease expired, stepping down", extra={"epoch": epoch})
                self._lost.set()
                return
            last_ok = time.monotonic()
            next_try = last_ok + interval

    async def resign(self) -> None:
        """Give up the role at once (clean shutdown) so a standby takes over without waiting."""
        if self._lease is not None:
            with contextlib.suppress(Exception):
                await self._lease.revoke()
