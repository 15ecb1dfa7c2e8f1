"""The coordinator's Prometheus metrics: groups by state, members, group epochs (each bump is an
assignment change), offset commits (count, latency), partition load time, and consumer lag per
group, topic and partition (high watermark minus committed offset) — the figure Kafka needs Burrow
or kafka-lag-exporter for.

Group gauges are read from the loaded shards at scrape time. Lag needs the high watermarks, which
live on the brokers: ``LagMonitor`` asks the partition leaders (ListOffsets, latest) every
``interval_s`` and keeps the last answer; the scrape reads that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from shared.metadata.types import PartitionState
from shared.metrics import LATENCY_BUCKETS
from shared.proto import tidelog_pb2 as pb
from shared.types import TopicPartition

log = logging.getLogger(__name__)
#: Consumer groups' states, then classic groups' own.
GROUP_STATES = ("Empty", "Assigning", "Reconciling", "Stable", "PreparingRebalance", "CompletingRebalance")
Committed = dict[tuple[str, TopicPartition], int]


def committed_offsets(shards: list[Any]) -> Committed:
    """Every (group, partition) committed offset in the loaded shards."""
    out: Committed = {}
    for shard in shards:
        for group_id, offsets in list(shard.offsets.items()):
            for tp, value in list(offsets.items()):
                out[(group_id, tp)] = value.offset
    return out


def compute_lag(committed: Committed, high_watermarks: dict[TopicPartition, int]) -> dict[tuple[str, TopicPartition], int]:
    """Lag = high watermark − committed offset (never negative; partitions without a known HW are left out)."""
    return {key: max(high_watermarks[key[1]] - off, 0) for key, off in committed.items() if key[1] in high_watermarks}


def _state(group: Any, attempts: int = 3) -> str | None:
    """The group's state, read from the scrape thread while the event loop may change its members
    (iterating a dict that changes size raises): try again, else leave the group out of this scrape."""
    for _ in range(attempts):
        try:
            return str(group.state)
        except RuntimeError:
            continue
    return None


class CoordinatorMetrics(Collector):
    def __init__(self, partitions: Callable[[], dict[int, Any]], registry: Any = REGISTRY) -> None:
        self.partitions = partitions  # __consumer_offsets partition -> PartitionRuntime (shard, loaded, stats)
        self.lag: dict[tuple[str, TopicPartition], int] = {}
        self.commits = Counter("tidelog_coordinator_offset_commits", "OffsetCommit requests handled",
                               registry=registry)
        self.commit_time = Histogram("tidelog_coordinator_offset_commit_time_seconds", "OffsetCommit latency "
                                     "(validation and the write to __consumer_offsets)", buckets=LATENCY_BUCKETS,
                                     registry=registry)
        registry.register(self)

    def shards(self) -> list[Any]:
        return [pr.shard for pr in list(self.partitions().values()) if pr.loaded]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        shards = self.shards()
        by_state = dict.fromkeys(GROUP_STATES, 0)
        members = GaugeMetricFamily("tidelog_coordinator_group_members", "Members per group", labels=["group"])
        epochs = GaugeMetricFamily("tidelog_coordinator_group_epoch", "Group epoch (bumps on every assignment "
                                   "change)", labels=["group"])
        for shard in shards:
            classic = getattr(shard, "classic", None)
            for gid, g in list(shard.groups.items()) + list(classic.groups.items() if classic is not None else ()):
                state = _state(g)
                if state is None:
                    continue
                by_state[state] = by_state.get(state, 0) + 1
                members.add_metric([gid], len(g.members))
                epochs.add_metric([gid], g.epoch)
        states = GaugeMetricFamily("tidelog_coordinator_groups", "Groups by state", labels=["state"])
        for state, n in by_state.items():
            states.add_metric([state], n)
        yield from (states, members, epochs)
        load = GaugeMetricFamily("tidelog_coordinator_partition_load_time_seconds",
                                 "Time the last load of each owned __consumer_offsets partition took", labels=["partition"])
        for p, pr in list(self.partitions().items()):
            if pr.loaded and "seconds" in pr.stats:
                load.add_metric([str(p)], pr.stats["seconds"])
        yield load
        lag = GaugeMetricFamily("tidelog_consumer_group_lag", "Records between the committed offset and the "
                                "high watermark", labels=["group", "topic", "partition"])
        lag_sum = GaugeMetricFamily("tidelog_consumer_group_lag_sum", "Lag summed over the group's partitions",
                                    labels=["group", "topic"])
        sums: dict[tuple[str, str], int] = {}
        for (gid, tp), n in list(self.lag.items()):
            lag.add_metric([gid, tp.topic, str(tp.partition)], n)
            sums[(gid, tp.topic)] = sums.get((gid, tp.topic), 0) + n
        for (gid, topic), n in sums.items():
            lag_sum.add_metric([gid, topic], n)
        yield from (lag, lag_sum)


class LagMonitor:
    """Refreshes ``metrics.lag`` every ``interval_s`` from the partition leaders' high watermarks."""

    def __init__(self, metrics: CoordinatorMetrics, store: Any, brokers: Callable[[], dict[int, str]],
                 stub: Callable[[str], Any], interval_s: float = 2.0) -> None:
        self.metrics = metrics
        self.store = store
        self.brokers = brokers
        self.stub = stub
        self.interval_s = interval_s

    async def run(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.refresh()
            await asyncio.sleep(self.interval_s)

    async def refresh(self) -> None:
        committed = committed_offsets(self.metrics.shards())
        topics = {tp.topic for _, tp in committed}
        hws = await self.high_watermarks(topics, {tp for _, tp in committed})
        self.metrics.lag = compute_lag(committed, hws)

    async def _leaders(self, topics: set[str]) -> dict[TopicPartition, int]:
        keys = self.store.keys
        leaders: dict[TopicPartition, int] = {}
        for topic in topics:
            snap = await self.store.get_prefix(keys.partitions_prefix(topic))
            for key, (value, _, _) in snap.items():
                leaders[TopicPartition(topic, int(key.decode().rsplit("/", 1)[-1]))] = PartitionState.from_json(value).leader
        return leaders

    async def high_watermarks(self, topics: set[str], wanted: set[TopicPartition]) -> dict[TopicPartition, int]:
        leaders = await self._leaders(topics)
        by_broker: dict[int, list[TopicPartition]] = {}
        for tp in wanted:
            if leaders.get(tp, -1) >= 0:
                by_broker.setdefault(leaders[tp], []).append(tp)
        addresses = self.brokers()
        calls: list[Awaitable[Any]] = []
        for broker, tps in by_broker.items():
            if broker in addresses:
                calls.append(self._list_latest(addresses[broker], tps))
        out: dict[TopicPartition, int] = {}
        for part in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(part, dict):
                out.update(part)
        return out

    async def _list_latest(self, address: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        req = pb.ListOffsetsRequest(replica_id=-1, topics=[
            pb.ListOffsetsTopic(name=t, partitions=[pb.ListOffsetsPartition(partition=p, timestamp=-1) for p in ps])
            for t, ps in by_topic.items()])
        resp = await self.stub(address).ListOffsets(req, timeout=5)
        return {TopicPartition(t.name, p.partition): p.offset
                for t in resp.topics for p in t.partitions if p.error_code == 0 and p.offset >= 0}


_default: CoordinatorMetrics | None = None


def coordinator_metrics(partitions: Callable[[], dict[int, Any]]) -> CoordinatorMetrics:
    """The process's metrics in the default registry (created once: a registry refuses duplicates)."""
    global _default
    if _default is None:
        _default = CoordinatorMetrics(partitions)
    else:
        _default.partitions = partitions
    return _default
