"""Replay equals live: random request sequences against a TxnShard, then the records it emitted replayed
into a fresh shard (whole, and compacted to the last record per id) give the same state and the same
answers. Every emitted transition is one the table allows."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.coordinator.txn.config import TxnConfig
from services.coordinator.txn.decisions import Decision, MarkerPlan, ProducerIdAndEpoch, Rec
from services.coordinator.txn.records import decode_key, decode_value, encode_key, encode_value
from services.coordinator.txn.shard import TxnShard
from services.coordinator.txn.state import TxnMetadata, TxnState, can_transition
from shared.types import TopicPartition

IDS = ("a", "b", "c")
PARTS = (TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0))
CONFIG = TxnConfig(transactional_id_expiration_ms=300)

_txn = st.sampled_from(IDS)
_delta = st.sampled_from([0, 0, 0, 0, 0, -1, 1])
_version = st.sampled_from([1, 2])
OPS = st.lists(st.one_of(
    st.tuples(st.just("init"), _txn, st.booleans(), _delta, st.sampled_from([100, 1000, 60_000])),
    st.tuples(st.just("add"), _txn, st.sets(st.sampled_from(PARTS), min_size=1), _version, _delta),
    st.tuples(st.just("offsets"), _txn, st.sampled_from(["g1", "g2"]), _version, _delta),
    st.tuples(st.just("end"), _txn, st.booleans(), _version, _delta),
    st.tuples(st.just("markers"), st.integers(0, 5)),
    st.tuples(st.just("markers"), st.integers(0, 5)),
    st.tuples(st.just("tick"), st.integers(1, 120)),
    st.tuples(st.just("expire")),
    st.tuples(st.just("failed_write"), _txn),
    st.tuples(st.just("craft"), _txn, st.integers(32763, 32767), st.booleans()),
), min_size=20, max_size=80)


class Live:
    def __init__(self) -> None:
        self.pids = itertools.count(1000)
        self.shard = TxnShard(3, CONFIG, lambda: next(self.pids))
        self.log: list[Rec] = []
        self.plans: list[MarkerPlan] = []
        self.now = 0

    def append(self, key: bytes, value: bytes | None) -> None:
        txn_id = decode_key(key)
        assert txn_id is not None
        old = self.shard.txns.get(txn_id)
        new = decode_value(value)
        if new is not None:
            state = TxnState(new.status)
            if old is None:
                assert state == TxnState.EMPTY or self._crafting
            else:
                assert self._crafting or can_transition(old.state, state, new.client_version), (old.state, state)
        else:
            assert old is not None and can_transition(old.state, TxnState.DEAD)
        self.log.append((key, value))
        self.shard.replay(key, value)

    _crafting = False

    def apply(self, d: Decision) -> None:
        self.shard.begin(d)
        for key, value in d.records:
            self.append(key, value)
        if d.markers is not None and d.records:
            self.plans.append(d.markers)

    def producer(self, txn: str, delta: int) -> tuple[int, int]:
        m = self.shard.txns.get(txn)
        return (m.producer_id, m.producer_epoch + delta) if m else (1, 0)

    def do(self, op: tuple[Any, ...]) -> None:
        kind, s = op[0], self.shard
        self.now += 1
        if kind == "init":
            _, txn, with_expected, delta, timeout = op
            exp = ProducerIdAndEpoch(*self.producer(txn, delta)) if with_expected else None
            self.apply(s.init_producer_id(txn, timeout, self.now, exp))
        elif kind == "add":
            _, txn, parts, version, delta = op
            self.apply(s.add_partitions(txn, *self.producer(txn, delta), parts, self.now, version))
        elif kind == "offsets":
            _, txn, group, version, delta = op
            self.apply(s.add_offsets(txn, *self.producer(txn, delta), group, self.now, 50, version))
        elif kind == "end":
            _, txn, commit, version, delta = op
            self.apply(s.end_txn(txn, *self.producer(txn, delta), commit, self.now, version))
        elif kind == "markers" and self.plans:
            plan = self.plans.pop(op[1] % len(self.plans))
            self.apply(s.complete(plan, self.now))
        elif kind == "tick":
            self.now += op[1]
            for d in s.expire_timed_out(self.now):
                self.apply(d)
        elif kind == "expire":
            for d in s.expire_ids(self.now):
                self.apply(d)
        elif kind == "failed_write":
            d = s.init_producer_id(op[1], 1000, self.now)
            s.begin(d)
            s.abandon(op[1])
        elif kind == "craft":
            _, txn, epoch, ongoing = op
            m = TxnMetadata(txn, 77, epoch, 1000, TxnState.ONGOING if ongoing else TxnState.EMPTY,
                            frozenset(PARTS[:1]) if ongoing else frozenset(), start_ms=self.now if ongoing else -1,
                            last_update_ms=self.now, client_version=2 if ongoing else 0)
            self._crafting = True
            self.append(encode_key(txn), encode_value(m.to_value()))
            self._crafting = False


def loaded_from(log: list[Rec]) -> TxnShard:
    pids = itertools.count(1000)
    shard = TxnShard(3, CONFIG, lambda: next(pids))
    for key, value in log:
        shard.replay(key, value)
    return shard


def compacted(log: list[Rec]) -> list[Rec]:
    last = {key: i for i, (key, _) in enumerate(log)}
    return [rec for i, rec in enumerate(log) if last[rec[0]] == i]


def probes(shard: TxnShard, now: int) -> list[Decision]:
    """The same questions asked of a shard: every answer depends only on its state."""
    out = []
    for txn in IDS:
        m = shard.txns.get(txn)
        pid, epoch = (m.producer_id, m.producer_epoch) if m else (1, 0)
        out.append(shard.init_producer_id(txn, 1000, now))
        out.append(shard.init_producer_id(txn, 1000, now, ProducerIdAndEpoch(pid, epoch - 1)))
        for version in (1, 2):
            for delta in (0, -1):
                out.append(shard.end_txn(txn, pid, epoch + delta, True, now, version))
                out.append(shard.end_txn(txn, pid, epoch + delta, False, now, version))
            out.append(shard.add_partitions(txn, pid, epoch, PARTS[1:], now, version))
        out.append(Decision(txn, message=repr(shard.verify_partitions(txn, pid, epoch, PARTS))))
    out += shard.expire_timed_out(now + 10_000) + shard.expire_ids(now + 10_000)
    out += [shard.complete(p, now) for p in shard.unfinished()]
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_replay_equals_live(ops: list[tuple[Any, ...]]) -> None:
    live = Live()
    for op in [("init", txn, False, 0, 1000) for txn in IDS] + ops:
        live.do(op)
    assert live.shard.pending == {}
    for log in (live.log, compacted(live.log)):
        loaded = loaded_from(log)
        assert loaded.txns == live.shard.txns
        assert loaded.unfinished() == live.shard.unfinished()
        live.pids, saved = itertools.count(1000), live.pids  # both allocators hand out the same ids
        try:
            assert probes(loaded, live.now) == probes(live.shard, live.now)
        finally:
            live.pids = saved
