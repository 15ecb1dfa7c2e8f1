"""Continuous balancing: a pure planner of replica moves. No I/O, clock injected.

Kafka leaves this to Cruise Control; Redpanda's continuous data balancing does it in the
cluster. Tidelog's controller runs :func:`plan` when :func:`triggers` says the cluster
drifted, and applies the moves as ordinary reassignments (KIP-455), a bounded number at a
time and under the replication throttle.

Goals, in priority order — a lower goal never undoes a higher one:

1. **Racks**: each partition's replicas on distinct racks while there are enough racks.
2. **Availability**: no replica on a broker that is excluded (decommissioning, or away
   past ``balancer.broker.unavailable.grace.ms``).
3. **Replica count**: every eligible broker holds within one replica of every other.
4. **Leader count**: preferred leaders (first replicas) within one of each other — done by
   reordering a partition's replicas, which moves no data.
5. **Bytes**: disk use per broker within ``balancer.disk.skew.percent`` of the mean, by
   swapping a replica of the fullest broker with a smaller one of the emptiest.

A move is the partition's whole target replica list, as ``kafka-reassign-partitions.sh``
plans are; the first replica is the preferred leader.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from shared.types import TopicPartition

#: ``balancer.enable``'s default (see the README's balancing section for why on).
DEFAULT_ENABLE = True
#: ``balancer.max.concurrent.moves``: reassignments in flight at once.
DEFAULT_MAX_CONCURRENT_MOVES = 8
#: ``balancer.broker.unavailable.grace.ms``: a broker away this long has its replicas moved.
DEFAULT_UNAVAILABLE_GRACE_MS = 15 * 60 * 1000
#: ``balancer.disk.skew.percent``: bytes per broker may differ from the mean by this much.
DEFAULT_DISK_SKEW_PERCENT = 20.0


@dataclass(frozen=True)
class BrokerView:
    id: int
    rack: str | None = None
    alive: bool = True
    #: when the broker was last seen alive (ms, the injected clock); None = never left
    away_since_ms: int | None = None


@dataclass(frozen=True)
class PartitionView:
    tp: TopicPartition
    replicas: tuple[int, ...]
    size_bytes: int = 0


@dataclass(frozen=True)
class Move:
    tp: TopicPartition
    replicas: tuple[int, ...]
    goal: str

    @property
    def moves_data(self) -> bool:
        return self.goal != "leaders"


@dataclass
class _State:
    brokers: dict[int, BrokerView]
    eligible: list[int]
    replicas: dict[TopicPartition, list[int]]
    sizes: dict[TopicPartition, int]
    locked: set[TopicPartition]
    excluded: set[int]
    count: dict[int, int] = field(default_factory=dict)
    leaders: dict[int, int] = field(default_factory=dict)
    bytes: dict[int, int] = field(default_factory=dict)

    def recount(self) -> None:
        self.count = {b: 0 for b in self.eligible}
        self.leaders = {b: 0 for b in self.eligible}
        self.bytes = {b: 0 for b in self.eligible}
        for tp, reps in self.replicas.items():
            for i, b in enumerate(reps):
                if b in self.count:
                    self.count[b] += 1
                    self.bytes[b] += self.sizes.get(tp, 0)
                    if i == 0:
                        self.leaders[b] += 1

    def rack(self, b: int) -> str | None:
        v = self.brokers.get(b)
        return v.rack if v else None

    def racks_ok(self, reps: Iterable[int]) -> bool:
        """Replicas on distinct racks, as far as the eligible brokers' racks allow."""
        reps = list(reps)
        racks = [self.rack(b) for b in reps]
        if any(r is None for r in racks):
            return True
        distinct = len({self.rack(b) for b in self.eligible})
        return len(set(racks)) >= min(len(reps), distinct)


def excluded_brokers(brokers: Iterable[BrokerView], now_ms: int, grace_ms: int,
                     decommissioning: Iterable[int] = ()) -> set[int]:
    """Brokers whose replicas must move: being decommissioned, or away longer than the grace time."""
    out = set(decommissioning)
    for b in brokers:
        if not b.alive and b.away_since_ms is not None and now_ms - b.away_since_ms >= grace_ms:
            out.add(b.id)
    return out


def plan(brokers: Iterable[BrokerView], partitions: Iterable[PartitionView], *,
         excluded: Iterable[int] = (), in_progress: Iterable[TopicPartition] = (),
         max_moves: int = DEFAULT_MAX_CONCURRENT_MOVES,
         disk_skew_percent: float = DEFAULT_DISK_SKEW_PERCENT) -> list[Move]:
    """Up to ``max_moves`` moves toward the goals, most important first. Partitions already
    being reassigned are left alone; a partition is moved at most once per plan."""
    views = {b.id: b for b in brokers}
    excl = set(excluded)
    # Targets: live brokers not excluded. A broker down but within its grace time is not a
    # target, and its replicas stay where they are until the grace time is over.
    eligible = sorted(b for b, v in views.items() if b not in excl and v.alive)
    parts = list(partitions)
    st = _State(views, eligible, {p.tp: list(p.replicas) for p in parts}, {p.tp: p.size_bytes for p in parts},
                set(in_progress), excl)
    if not eligible or max_moves <= 0:
        return []
    moves: dict[TopicPartition, Move] = {}
    for goal in (_racks, _availability, _replica_count, _leader_count):
        if len(moves) >= max_moves:
            break
        st.recount()
        goal(st, moves, max_moves)
    if len(moves) < max_moves:
        st.recount()
        _bytes(st, moves, max_moves, disk_skew_percent)
    return list(moves.values())


def _record(st: _State, moves: dict[TopicPartition, Move], tp: TopicPartition, reps: list[int], goal: str) -> None:
    st.replicas[tp] = reps
    st.locked.add(tp)
    first = moves.get(tp)
    moves[tp] = Move(tp, tuple(reps), goal if first is None else first.goal)
    st.recount()


def _free(st: _State, tp: TopicPartition) -> bool:
    return tp not in st.locked


def _least_loaded(st: _State, reps: list[int], replacing: int | None = None) -> int | None:
    """The eligible broker with the fewest replicas (then bytes) that keeps the racks right."""
    others = [b for b in reps if b != replacing]
    best = None
    for b in sorted(st.eligible, key=lambda b: (st.count[b], st.bytes[b], b)):
        if b in reps:
            continue
        trial = others + [b]
        if st.racks_ok(trial) or not st.racks_ok(reps):
            best = b
            if st.racks_ok(trial):
                return b
    return best


def _replace(reps: list[int], old: int, new: int) -> list[int]:
    return [new if b == old else b for b in reps]


def _racks(st: _State, moves: dict[TopicPartition, Move], limit: int) -> None:
    for tp in sorted(st.replicas):
        if len(moves) >= limit:
            return
        reps = st.replicas[tp]
        if not _free(st, tp) or st.racks_ok(reps):
            continue
        seen: set[str | None] = set()
        for b in reps:
            r = st.rack(b)
            if r in seen:
                used = {st.rack(x) for x in reps}
                target = next((c for c in sorted(st.eligible, key=lambda c: (st.count[c], c))
                               if c not in reps and st.rack(c) not in used), None)
                if target is not None:
                    _record(st, moves, tp, _replace(reps, b, target), "racks")
                break
            seen.add(r)


def _availability(st: _State, moves: dict[TopicPartition, Move], limit: int) -> None:
    for tp in sorted(st.replicas):
        if len(moves) >= limit:
            return
        reps = st.replicas[tp]
        if not _free(st, tp) or not st.excluded.intersection(reps):
            continue
        new = list(reps)
        for b in reps:
            if b in st.excluded:
                target = _least_loaded(st, new, replacing=b)
                if target is None:
                    break
                new = _replace(new, b, target)
        if new != reps:
            _record(st, moves, tp, new, "availability")


def _pairs(st: _State, load: dict[int, int]) -> list[tuple[int, int]]:
    """(fuller, emptier) broker pairs more than one apart, the widest gap first."""
    by = sorted(st.eligible, key=lambda b: (load[b], b))
    pairs = [(hi, lo) for hi in reversed(by) for lo in by if load[hi] - load[lo] > 1]
    return sorted(pairs, key=lambda p: load[p[1]] - load[p[0]])


def _replica_count(st: _State, moves: dict[TopicPartition, Move], limit: int) -> None:
    while len(moves) < limit:
        for hi, lo in _pairs(st, st.count):
            # Prefer a follower (no leadership change), then the smallest partition (cheapest to copy).
            candidates = sorted((tp for tp, reps in st.replicas.items() if hi in reps and lo not in reps
                                 and _free(st, tp)),
                                key=lambda tp: (st.replicas[tp][0] == hi, st.sizes.get(tp, 0), tp))
            tp = next((tp for tp in candidates if st.racks_ok(_replace(st.replicas[tp], hi, lo))
                       or not st.racks_ok(st.replicas[tp])), None)
            if tp is not None:
                _record(st, moves, tp, _replace(st.replicas[tp], hi, lo), "replicas")
                break
        else:
            return


def _leader_count(st: _State, moves: dict[TopicPartition, Move], limit: int) -> None:
    while len(moves) < limit:
        for hi, lo in _pairs(st, st.leaders):
            tp = next((tp for tp, reps in sorted(st.replicas.items())
                       if reps and reps[0] == hi and lo in reps and _free(st, tp)), None)
            if tp is not None:
                reps = st.replicas[tp]
                _record(st, moves, tp, [lo] + [b for b in reps if b != lo], "leaders")
                break
        else:
            return


def _bytes(st: _State, moves: dict[TopicPartition, Move], limit: int, skew_percent: float) -> None:
    if len(st.eligible) < 2:
        return
    while len(moves) < limit:
        mean = sum(st.bytes.values()) / len(st.eligible)
        hi = max(st.eligible, key=lambda b: (st.bytes[b], b))
        lo = min(st.eligible, key=lambda b: (st.bytes[b], -b))
        gap = st.bytes[hi] - st.bytes[lo]
        if mean <= 0 or (st.bytes[hi] - mean) <= mean * skew_percent / 100:
            return
        best: tuple[int, TopicPartition, TopicPartition] | None = None
        his = [tp for tp, r in st.replicas.items() if hi in r and lo not in r and _free(st, tp)]
        los = [tp for tp, r in st.replicas.items() if lo in r and hi not in r and _free(st, tp)]
        for a in his:
            for b in los:
                delta = st.sizes.get(a, 0) - st.sizes.get(b, 0)
                # A swap helps when it moves bytes toward the emptier broker without overshooting.
                if 0 < delta < gap and (best is None or abs(gap - 2 * delta) < abs(gap - 2 * best[0])):
                    na, nb = _replace(st.replicas[a], hi, lo), _replace(st.replicas[b], lo, hi)
                    if st.racks_ok(na) and st.racks_ok(nb):
                        best = (delta, a, b)
        if best is None or len(moves) + 2 > limit:
            return
        _, a, b = best
        na, nb = _replace(st.replicas[a], hi, lo), _replace(st.replicas[b], lo, hi)
        _record(st, moves, a, na, "bytes")
        _record(st, moves, b, nb, "bytes")


def triggers(brokers: Iterable[BrokerView], partitions: Iterable[PartitionView], *, now_ms: int,
             grace_ms: int = DEFAULT_UNAVAILABLE_GRACE_MS, decommissioning: Iterable[int] = (),
             disk_skew_percent: float = DEFAULT_DISK_SKEW_PERCENT) -> list[str]:
    """Why the cluster needs balancing now (empty: it does not). Cheap; run it every tick."""
    views = list(brokers)
    parts = list(partitions)
    reasons: list[str] = []
    excl = excluded_brokers(views, now_ms, grace_ms, decommissioning)
    on_excluded = {b for p in parts for b in p.replicas if b in excl}
    if on_excluded:
        reasons.append(f"replicas on excluded brokers {sorted(on_excluded)}")
    alive = [b.id for b in views if b.alive and b.id not in excl]
    if not alive:
        return reasons
    count = {b: 0 for b in alive}
    size = {b: 0 for b in alive}
    for p in parts:
        for b in p.replicas:
            if b in count:
                count[b] += 1
                size[b] += p.size_bytes
    if max(count.values()) - min(count.values()) > 1:
        empty = sorted(b for b, c in count.items() if c == 0)
        reasons.append(f"broker(s) {empty} joined with no replicas" if empty
                       else f"replica counts {min(count.values())}..{max(count.values())}")
    mean = sum(size.values()) / len(size)
    if mean > 0 and max(size.values()) - mean > mean * disk_skew_percent / 100:
        reasons.append(f"disk use drifted: max {max(size.values())} bytes vs mean {mean:.0f}")
    return reasons


def skew(partitions: Iterable[PartitionView], brokers: Iterable[int]) -> Mapping[str, int]:
    """Replica-count and leader-count spread (max − min) over the given brokers: the benchmark's figure."""
    ids = list(brokers)
    count = {b: 0 for b in ids}
    leaders = {b: 0 for b in ids}
    for p in partitions:
        for i, b in enumerate(p.replicas):
            if b in count:
                count[b] += 1
                leaders[b] += i == 0
    if not ids:
        return {"replicas": 0, "leaders": 0}
    return {"replicas": max(count.values()) - min(count.values()),
            "leaders": max(leaders.values()) - min(leaders.values())}
