"""The coordinator's partitions: ownership in etcd, loading, fenced writes, timers.

Owns a ``PartitionRuntime`` (shard + writer) per ``__consumer_offsets`` partition this
instance owns. Taking a partition over: one etcd transaction creates the ownership key
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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from services.coordinator.cluster_view import ViewWatcher
from services.coordinator.config import GroupConfig
from services.coordinator.group import fail
from services.coordinator.loader import load_partition
from services.coordinator.ownership import plan
from services.coordinator.record_builder import Rec
from services.coordinator.shard import GroupShard
from services.coordinator.writer import PartitionWriter
from shared.errors import ErrorCode
from shared.metadata.store import MetadataStore, Registration
from shared.offsets_topic import partition_for
from shared.proto import tidelog_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
MAX_PRODUCER_EPOCH = 32767


@dataclass
class PartitionRuntime:
    partition: int
    shard: GroupShard
    owner_revision: int
    writer: PartitionWriter | None = None
    loaded: bool = False
    stats: dict[str, Any] = field(default_factory=dict)
    #: parked classic-group requests (JoinGroup, SyncGroup) by ticket: failed with NOT_COORDINATOR on unload
    waiters: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    #: the last classic-group write: answers that need no write of their own still wait for it
    last_write: asyncio.Future[int] | None = None

    def fail_waiters(self, why: str) -> None:
        for fut in self.waiters.values():
            if not fut.done():
                fut.set_exception(fail(ErrorCode.NOT_COORDINATOR, f"partition {self.partition}: {why}"))
        self.waiters.clear()


class CoordinatorRuntime:
    def __init__(self, store: MetadataStore, instance: str, address: str, config: GroupConfig,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.keys = store.keys
        self.instance = instance
        self.address = address
        self.config = config
        self.clock = clock
        self.registration: Registration | None = None
        self.partitions: dict[int, PartitionRuntime] = {}
        self.watcher = ViewWatcher(store, self._on_topics, self._on_membership)
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
        for p in list(self.partitions):
            await self._unload(p, delete_key=True)
        for ch in self._channels.values():
            await ch.close()

    # -- routing ------------------------------------------------------------------------------------

    def runtime_for(self, group_id: str) -> PartitionRuntime:
        n = self.view.offsets_partitions
        if not n:
            raise fail(ErrorCode.COORDINATOR_NOT_AVAILABLE, "__consumer_offsets does not exist yet")
        pr = self.partitions.get(partition_for(group_id, n))
        if pr is None:
            raise fail(ErrorCode.NOT_COORDINATOR, f"this instance does not own group {group_id!r}")
        if not pr.loaded:
            raise fail(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"partition {pr.partition} is loading")
        return pr

    async def write(self, pr: PartitionRuntime, recs: list[Rec]) -> None:
        if recs:
            assert pr.writer is not None
            await pr.writer.write(recs)

    def submit(self, pr: PartitionRuntime, recs: list[Rec]) -> asyncio.Future[int]:
        """Queue ``recs`` for writing now; the future completes once they are committed."""
        assert pr.writer is not None
        return pr.writer.submit(recs)

    async def stub_for(self, partition: int) -> pb_grpc.BrokerStub | None:
        address = self.view.leader_address(partition)
        if address is None:
            self._reload_soon.set()
            return None
        stub = self._stubs.get(address)
        if stub is None:
            ch = self._channels.get(address)
            if ch is None:
                ch = self._channels[address] = grpc.aio.insecure_channel(address)
            stub = self._stubs[address] = pb_grpc.BrokerStub(ch)
        return stub

    # -- ownership -----------------------------------------------------------------------------------

    def _on_topics(self) -> None:
        for pr in list(self.partitions.values()):
            if pr.loaded:
                asyncio.ensure_future(self._apply_topics(pr))

    async def _apply_topics(self, pr: PartitionRuntime) -> None:
        with contextlib.suppress(Exception):
            await self.write(pr, pr.shard.set_topics(self.view.topics))

    def _on_membership(self) -> None:
        self._replan.set()

    def lease_lost(self) -> None:
        """Our lease expired (a pause, an etcd outage): every ownership key is gone."""
        for p in list(self.partitions):
            asyncio.ensure_future(self._unload(p, delete_key=False))

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
        v = self.view
        owners = {p: o for p, o in v.owners.items()}
        for p in self.partitions:  # what we hold counts as ours even if the watch lags
            owners.setdefault(p, {"owner": self.instance})
        claim, release = plan(v.offsets_partitions, v.instances, owners, self.instance)
        for p in release:
            await self._unload(p, delete_key=True)
        for p in claim:
            if p not in self.partitions:
                await self._claim(p)

    async def _claim(self, p: int) -> None:
        assert self.registration is not None and self.registration.lease is not None
        owner_key, producer_key = self.keys.offsets_owner(p), self.keys.offsets_producer(p)
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
            success=[t.put(owner_key, _json({"owner": self.instance, "address": self.address, "producer_epoch": epoch}),
                           lease=self.registration.lease),
                     self.store.op_put(producer_key, {"producer_id": pid, "producer_epoch": epoch})],
            failure=[])
        if not ok:
            return  # someone else got there first; the watch will tell
        kv = await self.store.get(owner_key)
        pr = PartitionRuntime(p, GroupShard(p, self.config), kv[1] if kv else 0)
        self.partitions[p] = pr
        pr.writer = PartitionWriter(p, pid, epoch, self.stub_for, lambda why: self._fenced(p, why),
                                    f"coordinator-{self.instance}")
        asyncio.ensure_future(self._load(pr))

    async def _load(self, pr: PartitionRuntime) -> None:
        try:
            assert pr.writer is not None
            marker = await pr.writer.write_marker()
            pr.shard.set_topics(self.view.topics)
            count, secs = await load_partition(pr.partition, marker + 1, self.stub_for, pr.shard.replay)
            pr.shard.loaded(self.now_ms())
            # Topics may have changed while no one owned the partition: bump those groups' epochs now.
            await pr.writer.write(pr.shard.set_topics(self.view.topics))
            pr.loaded = True
            pr.stats = {"records": count, "seconds": round(secs, 3), "records_per_s": round(count / secs) if secs else 0}
            log.info("partition loaded", extra={"partition": pr.partition, **pr.stats})
        except Exception as exc:
            log.warning("partition load failed", extra={"partition": pr.partition, "error": str(exc)})
            if self.partitions.get(pr.partition) is pr:
                await self._unload(pr.partition, delete_key=True)
                self._replan.set()

    def _fenced(self, p: int, why: str) -> None:
        log.warning("fenced: releasing partition", extra={"partition": p, "reason": why})
        asyncio.ensure_future(self._unload(p, delete_key=True))

    async def _unload(self, p: int, delete_key: bool) -> None:
        pr = self.partitions.pop(p, None)
        if pr is None:
            return
        pr.loaded = False
        pr.fail_waiters("partition unloaded")
        if pr.writer is not None:
            await pr.writer.close()
        if delete_key:
            key = self.keys.offsets_owner(p)
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
            for pr in list(self.partitions.values()):
                if not pr.loaded:
                    continue
                recs = pr.shard.expire(self.now_ms())
                if recs:
                    asyncio.ensure_future(self._write_expiry(pr, recs))

    async def _write_expiry(self, pr: PartitionRuntime, recs: list[Rec]) -> None:
        with contextlib.suppress(Exception):
            await self.write(pr, recs)
            pr.shard.apply_offsets(recs)


def _json(value: Any) -> bytes:
    from shared.metadata.store import dumps

    return dumps(value)
