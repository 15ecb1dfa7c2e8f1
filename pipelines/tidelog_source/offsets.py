"""Resolving topics and offsets against the cluster (driver side), and planning offset ranges.

Offsets are ``{topic: {"partition": offset}}`` (partition keys are strings, as JSON needs).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.tidelog_source.options import EARLIEST, LATEST, OptionError, SourceOptions
from shared.client import Consumer, TopicPartition
from shared.client.cluster import ClusterClient
from shared.errors import ErrorCode, error_for

Offsets = dict[str, dict[str, int]]


@dataclass(frozen=True)
class Range:
    topic: str
    partition: int
    start: int
    end: int


def to_tps(offsets: Offsets) -> dict[TopicPartition, int]:
    return {TopicPartition(t, int(p)): o for t, ps in offsets.items() for p, o in ps.items()}


def from_tps(tps: dict[TopicPartition, int]) -> Offsets:
    out: Offsets = {}
    for tp, off in sorted(tps.items()):
        out.setdefault(tp.topic, {})[str(tp.partition)] = off
    return out


class OffsetResolver:
    """Driver-side lookups: which partitions exist, and earliest / latest / by-timestamp offsets."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        # read_committed: ListOffsets latest is the last stable offset, so a plan never ends inside an open transaction
        self.consumer = Consumer(opts.bootstrap_servers, client_id="tidelog-spark-driver",
                                 isolation_level=opts.isolation_level, **opts.security.client_settings())
        self.cluster: ClusterClient = self.consumer.cluster

    def partitions(self) -> list[TopicPartition]:
        opts = self.opts
        if opts.assign is not None:
            return [TopicPartition(t, p) for t, ps in sorted(opts.assign.items()) for p in sorted(ps)]
        names = list(opts.subscribe) if opts.subscribe else None
        snap = self.cluster.refresh(names or [])
        if names is None:  # subscribePattern: every topic, filtered
            snap = self.cluster.refresh()
            from shared.proto import tidelog_pb2 as pb

            for addr in list(snap.brokers.values()):
                stub = self.cluster.reachable_stub(addr)
                if stub is None:
                    continue
                md = stub.Metadata(pb.MetadataRequest(), timeout=10)
                names = [t.name for t in md.topics if not t.error_code and opts.matches(t.name)]
                break
            names = names or []
            snap = self.cluster.refresh(names)
        out = []
        for t in sorted(names):
            parts = snap.topics.get(t)
            if parts is None:
                if snap.topic_errors.get(t) == ErrorCode.TOPIC_AUTHORIZATION_FAILED:  # as Spark's Kafka source: fail
                    raise error_for(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"not authorized to access topic {t!r}"
                                    f"{self._as()}: the principal needs DESCRIBE and READ on it (tidelog acls add)")
                continue  # not (yet) existing: Spark's Kafka source waits for it likewise
            out.extend(TopicPartition(t, p) for p in sorted(parts))
        return out

    def _as(self) -> str:
        sec = self.opts.security
        if sec.username:
            return f" as User:{sec.username}"
        if sec.protocol == "SSL":
            return f" over SSL ({'the certificate ' + sec.certfile if sec.certfile else 'no client certificate'})"
        return ""

    def earliest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return self.consumer.beginning_offsets(tps) if tps else {}

    def latest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return self.consumer.end_offsets(tps) if tps else {}

    def resolve(self, spec: object, tps: list[TopicPartition], *, starting: bool) -> dict[TopicPartition, int]:
        """Offsets for ``tps`` from ``earliest`` / ``latest`` / JSON (where -2 / -1 mean the same)."""
        earliest = self.earliest(tps)
        latest = self.latest(tps)
        if starting and self.opts.starting_by_timestamp is not None:
            wanted = {TopicPartition(t, int(p)): ts for t, ps in self.opts.starting_by_timestamp.items() for p, ts in ps.items()}
            return self._by_time(tps, wanted, latest)
        if starting and self.opts.starting_timestamp is not None:
            return self._by_time(tps, {tp: self.opts.starting_timestamp for tp in tps}, latest)
        if spec == "earliest":
            return earliest
        if spec == "latest":
            return latest
        assert isinstance(spec, dict)
        given = to_tps(spec)
        out = {}
        for tp in tps:
            off = given.get(tp)
            if off is None:
                if tp.topic in spec:
                    raise OptionError(f"{'startingOffsets' if starting else 'endingOffsets'} has no offset for {tp}")
                off = EARLIEST if starting else LATEST
            out[tp] = earliest[tp] if off == EARLIEST else latest[tp] if off == LATEST else off
        return out

    def _by_time(self, tps: list[TopicPartition], wanted: dict[TopicPartition, int],
                 latest: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        found = self.consumer.offsets_for_times({tp: wanted[tp] for tp in tps if tp in wanted})
        return {tp: (found[tp][0] if found.get(tp) else latest[tp]) for tp in tps}

    def close(self) -> None:
        self.consumer.close()


def plan_ranges(start: dict[TopicPartition, int], end: dict[TopicPartition, int],
                min_partitions: int | None) -> list[Range]:
    """One range per topic-partition with data; split them to reach ``min_partitions``.

    Spark's Kafka source rounds each range's share, which can give fewer pieces than asked
    (three equal ranges and minPartitions=7 give 2+2+2). Here the pieces are apportioned by
    largest remainder, so the plan has exactly ``min_partitions`` ranges unless there are
    fewer records than that (a range is never split below one record).
    """
    ranges = [Range(tp.topic, tp.partition, start.get(tp, 0), off) for tp, off in sorted(end.items())
              if off > start.get(tp, 0)]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    sizes = [r.end - r.start for r in ranges]
    total = sum(sizes)
    if total <= min_partitions:
        return [Range(r.topic, r.partition, o, o + 1) for r in ranges for o in range(r.start, r.end)]
    shares = [min_partitions * n / total for n in sizes]
    pieces = [max(1, int(s)) for s in shares]
    # hand out what is left, largest remainder first, never more pieces than records
    order = sorted(range(len(ranges)), key=lambda i: shares[i] - int(shares[i]), reverse=True)
    left = min_partitions - sum(pieces)
    while left > 0:
        for i in order:
            if left and pieces[i] < sizes[i]:
                pieces[i] += 1
                left -= 1
    out: list[Range] = []
    for r, n, k in zip(ranges, sizes, pieces, strict=True):
        bounds = [r.start + n * j // k for j in range(k + 1)]
        out.extend(Range(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:], strict=False))
    return out
