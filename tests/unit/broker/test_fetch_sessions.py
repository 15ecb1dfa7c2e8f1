"""Follower fetch sessions (services/broker/fetch_sessions.py), pure: what a follower's full and
incremental requests carry, how the leader resolves a session and what it answers, and that a
follower's state attached to a session gives the leader the same ISR timing as a fetch per partition."""

from __future__ import annotations

from services.broker.fetch_sessions import (
    INITIAL_EPOCH,
    MAX_EPOCH,
    FollowerSession,
    LeaderSession,
    Position,
    next_epoch,
    resolve_session,
)
from services.broker.replication_rules import FollowerState, isr_shrink_candidates
from shared.errors import ErrorCode
from shared.types import TopicPartition

A, B, C = (TopicPartition("t", p) for p in range(3))
LAG_MS = 10_000


def positions(table: dict[TopicPartition, Position | None]):
    return lambda tp: table.get(tp)


def opened(table: dict[TopicPartition, Position | None]) -> FollowerSession:
    fs = FollowerSession()
    plan = fs.plan(positions(table), list(table))
    assert fs.on_response(plan, 0, session_id=7)
    return fs


def test_the_first_request_is_full_and_names_every_fetched_partition() -> None:
    fs = FollowerSession()
    plan = fs.plan(positions({A: Position(5, 1), B: None, C: Position(0, 2)}), [A, B, C])
    assert plan.full and plan.session_id == 0 and plan.epoch == INITIAL_EPOCH
    assert plan.upserts == {A: Position(5, 1), C: Position(0, 2)} and plan.forgotten == []  # B: awaiting truncation
    assert fs.on_response(plan, 0, session_id=7)
    assert (fs.session_id, fs.epoch, fs.sent) == (7, 1, {A: (5, 1), C: (0, 2)})


def test_an_incremental_request_carries_only_changed_fetch_state() -> None:
    table: dict[TopicPartition, Position | None] = {A: Position(5, 1), B: Position(3, 1), C: Position(0, 2)}
    fs = opened(table)
    idle = fs.plan(positions(table), list(table))
    assert (idle.full, idle.session_id, idle.epoch, idle.upserts, idle.forgotten) == (False, 7, 1, {}, [])
    assert fs.on_response(idle, 0, 7) and fs.epoch == 2
    table[A] = Position(9, 1)  # appended what the leader sent
    table[B] = Position(3, 4, log_start_offset=2)  # new leader epoch (the log start alone is no change)
    table[C] = None  # backing off
    for tp in (A, B, C):
        fs.mark(tp)
    plan = fs.plan(positions(table), list(table))
    assert plan.upserts == {A: Position(9, 1), B: Position(3, 4, 2)} and plan.forgotten == [C]
    assert fs.on_response(plan, 0, 7)
    assert fs.sent == {A: (9, 1), B: (3, 4)}
    fs.mark(A)  # marked, but at the same position: nothing to send
    again = fs.plan(positions(table), list(table))
    assert again.upserts == {} and again.forgotten == []


def test_a_session_error_resets_and_the_next_request_is_full() -> None:
    table: dict[TopicPartition, Position | None] = {A: Position(5, 1), B: Position(3, 1)}
    for code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
        fs = opened(table)
        plan = fs.plan(positions(table), list(table))
        assert not fs.on_response(plan, code, 0)
        nxt = fs.plan(positions(table), list(table))
        assert nxt.full and nxt.session_id == 0 and set(nxt.upserts) == {A, B}
    fs = opened(table)
    fs.reset()  # a failed request or a new stream
    assert fs.plan(positions(table), list(table)).full


def test_the_leader_resolves_sessions_by_id_and_epoch() -> None:
    new, err = resolve_session(None, 2, 0, INITIAL_EPOCH, lambda: 41)
    assert err == ErrorCode.NONE and new is not None and (new.session_id, new.replica_id) == (41, 2)
    new.completed()  # the full request answered: the next is epoch 1
    assert resolve_session(new, 2, 41, 1, lambda: 0) == (new, ErrorCode.NONE)
    assert resolve_session(new, 2, 99, 1, lambda: 0) == (None, ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    assert resolve_session(new, 3, 41, 1, lambda: 0) == (None, ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    assert resolve_session(None, 2, 41, 1, lambda: 0) == (None, ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    assert resolve_session(new, 2, 41, 2, lambda: 0) == (None, ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    again, err = resolve_session(new, 2, 41, INITIAL_EPOCH, lambda: 42)  # a full request replaces it
    assert err == ErrorCode.NONE and again is not None and again.session_id == 42
    assert next_epoch(MAX_EPOCH) == 1 and next_epoch(1) == 2


def test_the_leader_answers_only_records_errors_and_news() -> None:
    s = LeaderSession(1, replica_id=2)
    assert s.apply([(A, 5, 1, 100), (B, 3, 1, 100)], []) == []
    assert s.needs_answer(A, 0, 0, 5, 0)  # never answered: the follower learns its high watermark
    s.answered(A, 5, 0)
    assert not s.needs_answer(A, 0, 0, 5, 0)  # nothing new: left out of the response
    assert s.needs_answer(A, 0, 0, 6, 0)  # high watermark moved
    assert s.needs_answer(A, 0, 0, 5, 2)  # log start moved
    assert s.needs_answer(A, 0, 120, 5, 0)  # records
    assert s.needs_answer(A, int(ErrorCode.FENCED_LEADER_EPOCH), 0, 5, 0)
    s.apply([(A, 9, 1, 100)], [])  # a new offset at the same epoch keeps what was answered
    assert s.partitions[A].fetch_offset == 9 and not s.needs_answer(A, 0, 0, 5, 0)
    s.apply([(A, 9, 2, 100)], [])  # a new leader epoch starts the partition over
    assert s.needs_answer(A, 0, 0, 5, 0)


def test_the_leader_reads_only_dirty_partitions_of_its_session() -> None:
    woken: list[int] = []
    s = LeaderSession(1, replica_id=2, on_dirty=lambda: woken.append(1))
    s.apply([(A, 5, 1, 100), (B, 3, 1, 100)], [])
    s.mark_dirty(A)
    s.mark_dirty(C)  # not in this session: ignored
    assert s.take_dirty() == {A} and s.take_dirty() == set() and woken == [1]
    s.mark_dirty(B)
    assert s.apply([], [B, C]) == [B]  # forgotten: out of the session, no longer dirty
    assert s.take_dirty() == set() and set(s.partitions) == {A}


def test_a_state_attached_to_a_session_times_the_isr_as_a_fetch_per_partition_would() -> None:
    """The leader of one partition, a follower fetching every 500 ms: once with a fetch per partition
    (``fetched``), once in a session that names the partition only when its offset changes."""
    now, leo = 1_000_000, 10
    per_fetch, in_session = FollowerState(), FollowerState()
    session = LeaderSession(1, replica_id=2)

    def fetch(offset: int, changed: bool) -> None:
        per_fetch.fetched(now, offset, leo)
        if changed:
            in_session.attach(session, offset, leo)
        session.last_fetch_ms = now

    def same() -> bool:
        return (per_fetch.last_fetch_ms, per_fetch.last_caught_up_ms, per_fetch.log_end_offset) == (
            in_session.last_fetch_ms, in_session.last_caught_up_ms, in_session.log_end_offset)

    fetch(10, changed=True)
    for _ in range(10):  # idle: caught up at every fetch, though the session names nothing
        now += 500
        fetch(10, changed=False)
        assert same()
    leo = 12  # the leader appends; the follower is slow to fetch it
    in_session.leader_appended()
    caught_up_at = now
    for _ in range(30):
        now += 500
        fetch(10, changed=False)
        assert same() and in_session.last_caught_up_ms == caught_up_at
    shrink = isr_shrink_candidates(now, 1, [1, 2], {2: in_session}, LAG_MS)
    assert shrink == isr_shrink_candidates(now, 1, [1, 2], {2: per_fetch}, LAG_MS) == [2]
    now += 500
    fetch(12, changed=True)  # caught up again
    assert same() and in_session.last_caught_up_ms == now
    in_session.detach()  # the session ended: the times stop at its last fetch
    stopped = now
    now += 20_000
    assert (in_session.last_fetch_ms, in_session.last_caught_up_ms) == (stopped, stopped)
    assert isr_shrink_candidates(now, 1, [1, 2], {2: in_session}, LAG_MS) == [2]
