"""The coordinator's partitions: ownership in etcd, loading, fenced writes, timers.

Owns a ``PartitionRuntime`` (shard + writer) per partition this instance owns, of each internal
topic it serves (a ``PartitionKind``: ``__consumer_offsets`` for groups, ``__transaction_state``
for transactions; each kind's partitions are owned, balanced and loaded independently, by the
same code). Taking a partition over: one etcd transaction creates the ownership key
on this instance's lease and bumps the partition's producer epoch; the marker write then
fences the previous owner at the brokers; the partition is loaded up to the marker and
only then served (COORDINATOR_LOAD_IN_PROGRESS meanwhile). Any failed write, a lost lease
or a rebalance of partitions among instances unloads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from services.coordinator.cluster_view import ViewWatcher, WatchedTopic
from services.coordinator.config import GroupConfig
from services.coordinator.group import fail
from services.coordinator.loader import load_partition
from services.coordinator.ownership import plan
from services.coordinator.partition_kind import GROUPS, TRANSACTIONS, PartitionKind, groups_kind
from services.coordinator.record_builder import Rec
from services.coordinator.writer import PartitionWriter
from shared.coordinator_lookup import request_internal_topic
from shared.errors import ErrorCode
from shared.metadata.store import MetadataStore, Registration
from shared.offsets_topic import OFFSETS_TOPIC
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.security.transport import aio_channel

log = logging.getLogger(__name__)
MAX_PRODUCER_EPOCH = 32767
LOAD_RETRY_S = 2.0  # a partition whose load failed is claimed again after this long


@dataclass
class PartitionRuntime:
    partition: int
    #: the kind's shard: a GroupShard for GROUPS (``PartitionKind.new_shard``)
    shard: Any
    owner_revision: int
    writer: PartitionWriter | None = None
    loaded: bool = False
    stats: dict[str, Any] = field(default_factory=dict)
    #: parked requests (classic JoinGroup, SyncGroup) by ticket: failed with NOT_COORDINATOR on unload
    waiters: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    #: the last classic-group write: answers that need no write of their own still wait for it
    last_write: asyncio.Future[int] | None = None
    #: the PartitionKind's name (GROUPS, TRANSACTIONS)
    kind: str = GROUPS

    def fail_waiters(self, why: str) -> None:
        for fut in self.waiters.values():
            if not fut.done():
                fut.set_exception(fail(ErrorCode.NOT_COORDINATOR, f"partition {self.partition}: {why}"))
        self.waiters.clear()


class CoordinatorRuntime:
    """``kinds``: the internal topics served (default: groups only); the groups kind, if given, must
    be named GROUPS (``partition_kind.groups_kind``)."""

    def __init__(self, store: MetadataStore, instance: str, address: str, config: GroupConfig,
                 clock: Callable[[], float] = time.time, kinds: Sequence[PartitionKind] | None = None) -> None:
        self.store = store
        self.keys = store.keys
        self.instance = instance
        self.address = address
        self.client_address = ""  # secure clusters: the TLS port clients connect to (owner records carry it)
        self.config = config
        self.clock = clock
        self.registration: Registration | None = None
        self.kinds: dict[str, PartitionKind] = {k.name: k for k in (kinds or [groups_kind(config)])}
        #: kind name -> partition -> its runtime, for every partition this instance owns
        self.owned: dict[str, dict[int, PartitionRuntime]] = {name: {} for name in self.kinds}
        #: the __consumer_offsets partitions (the groups' API modules, metrics and classic timers use it)
        self.partitions: dict[int, PartitionRuntime] = self.owned.setdefault(GROUPS, {})
        self._retry_at: dict[tuple[str, int], float] = {}  # (kind, partition) -> not claimed before (monotonic)
        self._requested: set[str] = set()  # internal topics whose creation this instance asked for
        self.watcher = ViewWatcher(store, self._on_topics, self._on_membership,
                                   [WatchedTopic(k.topic, k.owners_prefix) for k in self.kinds.values()])
        self._replan = asyncio.Event()
        self._reload_soon = asyncio.Event()
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, pb_grpc.BrokerStub] = {}
        self._tasks: list[asyncio.Task[Any]] = []

    @property
    def view(self) -> Any:
        return self.watcher.view

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def start(self, registration: Registration) -> None:
        self.registration = registration
        self.watcher.start()
        await asyncio.wait_for(self.watcher.ready.wait(), 30)
        self._tasks.append(asyncio.ensure_future(self._rebalance_loop()))
        self._tasks.append(asyncio.ensure_future(self._timer_loop()))
        self._tasks.append(asyncio.ensure_future(self._reload_loop()))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for kind, owned in self.owned.items():
            for p in list(owned):
                await self._unload(kind, p, delete_key=True)
        for ch in self._channels.values():
            await ch.close()

    # -- routing ------------------------------------------------------------------------------------

    def runtime_for(self, group_id: str) -> PartitionRuntime:
        """The loaded ``__consumer_offsets`` partition of ``group_id`` (NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE otherwise)."""
        return self.runtime_of(GROUPS, group_id)

    def txn_runtime_for(self, transactional_id: str) -> PartitionRuntime:
        """The loaded ``__transaction_state`` partition of ``transactional_id``, as ``runtime_for``."""
        return self.runtime_of(TRANSACTIONS, transactional_id)

    def runtime_of(self, kind_name: str, key: str) -> PartitionRuntime:
        kind = self.kinds.get(kind_name)
        if kind is None:
            raise fail(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"this coordinator does not serve {kind_name}")
        n = self.view.partitions_of(kind.topic)
        if not n:
            self.request_topic(kind)
            raise fail(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{kind.topic} does not exist yet")
        pr = self.owned[kind_name].get(kind.partition_for(key, n))
        if pr is None:
            raise fail(ErrorCode.NOT_COORDINATOR, f"this instance does not own {kind.key_name} {key!r}")
        if not pr.loaded:
            raise fail(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"{kind.topic} partition {pr.partition} is loading")
        return pr

    def request_topic(self, kind: PartitionKind) -> None:
        """Ask the controller to create ``kind``'s topic (kinds ``created_on_request``), once per process."""
        if not kind.created_on_request or kind.topic in self._requested or self.view.partitions_of(kind.topic):
            return
        self._requested.add(kind.topic)
        asyncio.ensure_future(self._request_topic(kind.topic))

    async def _request_topic(self, topic: str) -> None:
        try:
            await request_internal_topic(self.store, topic, self.instance)
        except Exception as exc:
            self._requested.discard(topic)  # asked again on the next lookup
            log.info("internal topic request failed", extra={"topic": topic, "error": str(exc)})

    async def write(self, pr: PartitionRuntime, recs: list[Rec]) -> None:
        if recs:
            assert pr.writer is not None
            await pr.writer.write(recs)

    def submit(self, pr: PartitionRuntime, recs: list[Rec]) -> asyncio.Future[int]:
        """Queue ``recs`` for writing now; the future completes once they are committed."""
        assert pr.writer is not None
        return pr.writer.submit(recs)

    async def stub_for(self, partition: int, topic: str = OFFSETS_TOPIC) -> pb_grpc.BrokerStub | None:
        address = self.view.leader_address(partition, topic)
        if address is None:
            self._reload_soon.set()
            return None
        stub = self._stubs.get(address)
        if stub is None:
            ch = self._channels.get(address)
            if ch is None:
                ch = self._channels[address] = aio_channel(address)
            stub = self._stubs[address] = pb_grpc.BrokerStub(ch)
        return stub

    # -- ownership -----------------------------------------------------------------------------------

    def _on_topics(self) -> None:
        for kind in self.kinds.values():
            if kind.follows_topics:
                for pr in list(self.owned[kind.name].values()):
                    if pr.loaded:
                        asyncio.ensure_future(self._apply_topics(pr))

    async def _apply_topics(self, pr: PartitionRuntime) -> None:
        with contextlib.suppress(Exception):
            await self.write(pr, pr.shard.set_topics(self.view.topics, self.view.partition_racks))

    def _on_membership(self) -> None:
        self._replan.set()

    def lease_lost(self) -> None:
        """Our lease expired (a pause, an etcd outage): every ownership key is gone."""
        for kind, owned in self.owned.items():
            for p in list(owned):
                asyncio.ensure_future(self._unload(kind, p, delete_key=False))

    async def _rebalance_loop(self) -> None:
        while True:
            await self._replan.wait()
            self._replan.clear()
            try:
                await self._rebalance()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("partition rebalance failed")
                await asyncio.sleep(0.5)
                self._replan.set()

    async def _rebalance(self) -> None:
        for kind in self.kinds.values():
            await self._rebalance_kind(kind)

    async def _rebalance_kind(self, kind: PartitionKind) -> None:
        v = self.view
        held = self.owned[kind.name]
        owners = dict(v.owners_of(kind.topic))
        for p in held:  # what we hold counts as ours even if the watch lags
            owners.setdefault(p, {"owner": self.instance})
        claim, release = plan(v.partitions_of(kind.topic), v.instances, owners, self.instance)
        for p in release:
            await self._unload(kind.name, p, delete_key=True)
        now = time.monotonic()
        later = [self._retry_at[(kind.name, p)] - now for p in claim if self._retry_at.get((kind.name, p), 0) > now]
        for p in claim:
            if p not in held and self._retry_at.get((kind.name, p), 0) <= now:
                await self._claim(kind, p)
        if later:  # a failed load: try again once its pause is over
            asyncio.get_running_loop().call_later(min(later), self._replan.set)

    async def _claim(self, kind: PartitionKind, p: int) -> None:
        assert self.registration is not None and self.registration.lease is not None
        owner_key, producer_key = kind.owner_key(self.keys, p), kind.producer_key(self.keys, p)
        got = await self.store.get(producer_key)
        if got is None or got[0]["producer_epoch"] >= MAX_PRODUCER_EPOCH:
            pid, epoch = await self.store.allocate_block(self.keys.producer_ids(), 1), 0
            guard = self.store.cmp_absent(producer_key) if got is None else self.store.cmp_mod_revision(producer_key, got[2])
        else:
            pid, epoch = int(got[0]["producer_id"]), int(got[0]["producer_epoch"]) + 1
            guard = self.store.cmp_mod_revision(producer_key, got[2])
        t = self.store.client.transactions
        ok, _ = await self.store.client.transaction(
            compare=[self.store.cmp_absent(owner_key), guard],
            success=[t.put(owner_key, _json({"owner": self.instance, "address": self.address, "producer_epoch": epoch,
                                              **({"client_address": self.client_address} if self.client_address
                                                 else {})}),
                           lease=self.registration.lease),
                     self.store.op_put(producer_key, {"producer_id": pid, "producer_epoch": epoch})],
            failure=[])
        if not ok:
            return  # someone else got there first; the watch will tell
        kv = await self.store.get(owner_key)
        pr = PartitionRuntime(p, kind.new_shard(p), kv[1] if kv else 0, kind=kind.name)
        self.owned[kind.name][p] = pr
        topic = kind.topic

        async def stub_for(partition: int) -> pb_grpc.BrokerStub | None:
            return await self.stub_for(partition, topic)

        pr.writer = PartitionWriter(p, pid, epoch, stub_for, lambda why: self._fenced(kind.name, p, why),
                                    f"coordinator-{self.instance}", topic=topic, marker_key=kind.marker_key)
        asyncio.ensure_future(self._load(kind, pr, stub_for))

    async def _load(self, kind: PartitionKind, pr: PartitionRuntime,
                    stub_for: Callable[[int], Awaitable[pb_grpc.BrokerStub | None]]) -> None:
        where = {"topic": kind.topic, "partition": pr.partition}
        try:
            assert pr.writer is not None
            marker = await pr.writer.write_marker()
            if kind.follows_topics:
                pr.shard.set_topics(self.view.topics, self.view.partition_racks)
            count, secs = await load_partition(pr.partition, marker + 1, stub_for, pr.shard.replay, topic=kind.topic)
            pr.shard.loaded(self.now_ms())
            if kind.follows_topics:
                # Topics may have changed while no one owned the partition: bump those groups' epochs now.
                await pr.writer.write(pr.shard.set_topics(self.view.topics, self.view.partition_racks))
            pr.loaded = True
            pr.stats = {"records": count, "seconds": round(secs, 3), "records_per_s": round(count / secs) if secs else 0}
            log.info("partition loaded", extra={**where, **pr.stats})
            if kind.on_loaded is not None:
                await kind.on_loaded(pr)
        except Exception as exc:
            log.warning("partition load failed", extra={**where, "error": str(exc)})
            if self.owned[kind.name].get(pr.partition) is pr:
                self._retry_at[(kind.name, pr.partition)] = time.monotonic() + LOAD_RETRY_S
                await self._unload(kind.name, pr.partition, delete_key=True)

    def _fenced(self, kind: str, p: int, why: str) -> None:
        log.warning("fenced: releasing partition", extra={"topic": self.kinds[kind].topic, "partition": p, "reason": why})
        asyncio.ensure_future(self._unload(kind, p, delete_key=True))

    async def _unload(self, kind: str, p: int, delete_key: bool) -> None:
        pr = self.owned[kind].pop(p, None)
        if pr is None:
            return
        pr.loaded = False
        pr.fail_waiters("partition unloaded")
        if pr.writer is not None:
            await pr.writer.close()
        if delete_key:
            key = self.kinds[kind].owner_key(self.keys, p)
            with contextlib.suppress(Exception):
                await self.store.guarded_txn(key, pr.owner_revision, [self.store.op_delete(key)])
        self._replan.set()

    # -- timers ------------------------------------------------------------------------------------

    async def _reload_loop(self, every_s: float = 5.0) -> None:
        """Re-read the view every few seconds, and soon after a leader was found missing."""
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._reload_soon.wait(), every_s)
            self._reload_soon.clear()
            try:
                await self.watcher.reload()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.info("view reload failed", extra={"error": str(exc)})
            await asyncio.sleep(0.2)

    async def _timer_loop(self) -> None:
        tick = max(0.05, min(0.5, self.config.session_timeout_ms / 20_000))
        while True:
            await asyncio.sleep(tick)
            for kind in self.kinds.values():
                for pr in list(self.owned[kind.name].values()):
                    if not pr.loaded:
                        continue
                    recs = pr.shard.expire(self.now_ms())
                    if recs:
                        asyncio.ensure_future(self._write_expiry(kind, pr, recs))

    async def _write_expiry(self, kind: PartitionKind, pr: PartitionRuntime, recs: list[Rec]) -> None:
        with contextlib.suppress(Exception):
            await self.write(pr, recs)
            if kind.expiry_written is not None:
                kind.expiry_written(pr.shard, recs)


def _json(value: Any) -> bytes:
    from shared.metadata.store import dumps

    return dumps(value)
