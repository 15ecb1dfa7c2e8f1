"""The leader's side of follower fetch sessions (rules in ``fetch_sessions``): one session per FetchStream.

A follower opens its session with a full request on its stream; the session ends with the stream (a
reconnection is a new session, as the follower's reset makes it). A request reads only the partitions it
changes and those marked dirty since (the replica manager marks every partition change in every session),
long-polls on the session's own signal, and answers only what ``LeaderSession.needs_answer`` allows.
Follower fetch offsets still drive the high watermark and the ISR: a partition named with a new offset
attaches the follower's state to the session (``Partition.update_follower_in_session``), after which
the session's fetch time stands for every fetch of it. The follower's log start offset, named with the
partition, goes to the same state: the leader's low watermark (DeleteRecords) waits for it.

Every request must carry the follower's current broker epoch (``replica_epoch``, KIP-380): otherwise it
is refused whole with ``STALE_BROKER_EPOCH`` after a short pause (the follower retries at that pace
while the leader's metadata catches up with its new registration), the stream's session ends and nothing
moves. A partition is served and moves follower state only for a replica id among its replicas.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from typing import TYPE_CHECKING, Any

from services.broker import request_limits
from services.broker.fetch_reader import read_partition, replica_refusal
from services.broker.fetch_sessions import INITIAL_EPOCH, LeaderSession, resolve_session
from services.broker.replica_results import FetchPartitionResult, grpc_partition_data
from services.broker.replication_throttle import ReplicationThrottles
from shared.errors import ErrorCode
from shared.proto import tidelog_pb2 as pb
from shared.proto.fetch_wire import FetchPartitionData, encode_fetch_response
from shared.records.header import next_offset_after
from shared.types import TopicPartition

if TYPE_CHECKING:
    from services.broker.partition import Partition
    from services.broker.replica_manager import ReplicaManager

#: How long a refused (stale-epoch) request waits before its answer, at most: no busy retry loop.
REFUSAL_PAUSE_MS = 500

_ids = itertools.count(int.from_bytes(os.urandom(3), "big") + 1)  # session ids, distinct across restarts


def is_session_fetch(request: pb.FetchRequest) -> bool:
    """A follower's request in a fetch session (epoch -1: a sessionless fetch, served as before)."""
    return request.replica_id >= 0 and request.session_epoch >= 0


class StreamFetchSession:
    """The follower fetch session of one FetchStream."""

    def __init__(self, rm: ReplicaManager) -> None:
        self.rm = rm
        self.session: LeaderSession | None = None
        # The follower's log start offset per partition, as its last request naming the partition said.
        self.log_starts: dict[TopicPartition, int] = {}

    def close(self) -> None:
        """The stream ended or a new session replaced this one: the follower's states stop following it."""
        session, self.session = self.session, None
        self.log_starts = {}
        if session is None:
            return
        self.rm.fetch_sessions.discard(session)
        for tp in session.partitions:
            self._detach(session, tp)

    def _detach(self, session: LeaderSession, tp: TopicPartition) -> None:
        part = self.rm.partitions.get(tp)
        if part is not None:
            part.detach_follower(session.replica_id, session)

    async def fetch(self, request: pb.FetchRequest, metrics: Any = None) -> bytes:
        refusal = replica_refusal(self.rm.view.brokers, request.replica_id, request.replica_epoch)
        if refusal:
            self.close()
            await asyncio.sleep(min(request_limits.fetch_wait_ms(request.max_wait_ms), REFUSAL_PAUSE_MS) / 1000)
            return encode_fetch_response(correlation_id=request.correlation_id, topics=[], error_code=refusal)
        session, error = resolve_session(self.session, request.replica_id, request.session_id,
                                         request.session_epoch, lambda: next(_ids) % (2**31 - 1) or 1)
        if session is None:
            return encode_fetch_response(correlation_id=request.correlation_id, topics=[], error_code=error)
        if session is not self.session:
            self.close()
            self.session = session
            self.rm.fetch_sessions.add(session)
        max_bytes = request_limits.fetch_max_bytes(request.max_bytes)
        changed = [(TopicPartition(t.name, p.partition), p.fetch_offset,
                    p.current_leader_epoch if p.current_leader_epoch else -1,
                    request_limits.partition_max_bytes(p.partition_max_bytes or 1024 * 1024, max_bytes))
                   for t in request.topics for p in t.partitions]
        forgotten = [TopicPartition(t.name, p.partition) for t in request.forgotten_topics for p in t.partitions]
        for tp in session.apply(changed, forgotten):
            self._detach(session, tp)
            self.log_starts.pop(tp, None)
        self.log_starts.update((TopicPartition(t.name, p.partition), p.log_start_offset)
                               for t in request.topics for p in t.partitions)
        started = time.perf_counter()
        reads = [tp for tp, *_ in changed] if request.session_epoch != INITIAL_EPOCH else list(session.partitions)
        results, read_s = await self._serve(session, reads, request_limits.fetch_wait_ms(request.max_wait_ms),
                                            request_limits.fetch_min_bytes(request.min_bytes), max_bytes)
        session.completed()
        if metrics is not None:
            metrics.fetched(results)
            metrics.request_done("FetchFollower", 0.0, read_s, max(time.perf_counter() - started - read_s, 0.0))
        return _encode(request.correlation_id, session, results)

    async def _serve(self, session: LeaderSession, changed: list[TopicPartition], max_wait_ms: int,
                     min_bytes: int, max_bytes: int) -> tuple[dict[TopicPartition, FetchPartitionResult], float]:
        """Read the changed and dirty partitions, long-polling until ``min_bytes``, an error or the wait ends."""
        rm = self.rm
        for tp in changed:  # before the session's fetch time moves: a follower caught up until now stays so
            part = self._fetchable(session, tp)
            if part is not None:
                part.update_follower_in_session(session.replica_id, session.partitions[tp].fetch_offset, session,
                                                self.log_starts.get(tp, -1))
        deadline = time.monotonic() + max_wait_ms / 1000
        wake = asyncio.Event()
        session.on_dirty = wake.set
        answers: dict[TopicPartition, FetchPartitionResult] = {}
        to_read = set(changed)
        starved: set[TopicPartition] = set()
        read_s = 0.0
        try:
            while True:
                session.last_fetch_ms = rm.clock()
                to_read |= session.take_dirty()
                wake.clear()
                t0 = time.perf_counter()
                error = self._read(session, to_read, answers, starved, max_bytes)
                read_s += time.perf_counter() - t0
                to_read = set()
                remaining = deadline - time.monotonic()
                if error or remaining <= 0 or sum(len(r.records) for r in answers.values()) >= min_bytes:
                    break
                try:
                    await asyncio.wait_for(wake.wait(), remaining)
                except TimeoutError:
                    session.last_fetch_ms = rm.clock()
                    break
        finally:
            session.on_dirty = None
        # Had data but got no room in this response: read again next time (even if answered for its HW).
        session.dirty |= {tp for tp in starved if tp not in answers or not answers[tp].records}
        for tp, r in answers.items():
            session.answered(tp, r.high_watermark, r.log_start_offset)
        return answers, read_s

    def _fetchable(self, session: LeaderSession, tp: TopicPartition) -> Partition | None:
        part = self.rm.partitions.get(tp)
        sp = session.partitions.get(tp)
        if part is None or sp is None or not part.is_leader:
            return None
        if session.replica_id == self.rm.broker_id or session.replica_id not in part.replicas:
            return None
        if sp.leader_epoch >= 0 and sp.leader_epoch != part.leader_epoch:
            return None
        return part

    def _read(self, session: LeaderSession, tps: set[TopicPartition], answers: dict[TopicPartition, FetchPartitionResult],
              starved: set[TopicPartition], max_bytes: int) -> bool:
        """Read ``tps`` into ``answers`` (only what needs answering); True if one of them failed."""
        total = sum(len(r.records) for r in answers.values())
        error = False
        throttle: ReplicationThrottles | None = getattr(self.rm, "replication_throttle", None)
        for tp in tps:
            sp = session.partitions.get(tp)
            if sp is None:
                continue
            budget, min_one = min(sp.max_bytes, max_bytes - total), total == 0
            throttled = throttle is not None and throttle.leader.limited and self._leader_throttled(throttle, session, tp)
            if throttled and throttle is not None:  # Kafka's shouldLeaderThrottle: nothing while the quota is used up
                budget = 0 if throttle.leader.exceeded() else throttle.leader.allowance(budget)
                min_one = min_one and budget > 0
            def attach(part: Partition, sp: Any = sp, log_start: int = self.log_starts.get(tp, -1)) -> None:
                if not part.follower_attached(session.replica_id, session):  # e.g. new states after an election
                    part.update_follower_in_session(session.replica_id, sp.fetch_offset, session, log_start)

            r = read_partition(self.rm, tp, sp.fetch_offset, sp.leader_epoch, budget,
                               for_consumer=False, min_one=min_one, before_read=attach, replica_id=session.replica_id)
            if throttled and throttle is not None:
                throttle.leader.record(len(r.records))
            error = error or r.error != ErrorCode.NONE
            if not r.error and not r.records and r.log_end_offset > sp.fetch_offset:
                starved.add(tp)
            if tp in answers or session.needs_answer(tp, r.error, len(r.records), r.high_watermark, r.log_start_offset):
                total += len(r.records) - (len(answers[tp].records) if tp in answers else 0)
                answers[tp] = r
        return error


    def _leader_throttled(self, throttle: ReplicationThrottles, session: LeaderSession, tp: TopicPartition) -> bool:
        part = self.rm.partitions.get(tp)
        return part is not None and part.is_leader and throttle.leader_throttled(
            part.log.config.extra, tp.partition, session.replica_id, part.isr)


def _encode(correlation_id: int, session: LeaderSession, results: dict[TopicPartition, FetchPartitionResult]) -> bytes:
    by_topic: dict[str, list[FetchPartitionData]] = {}
    for tp, r in results.items():
        sp = session.partitions.get(tp)
        fetch_offset = sp.fetch_offset if sp is not None else -1
        by_topic.setdefault(tp.topic, []).append(
            grpc_partition_data(tp, r, fetch_offset, next_offset_after(r.records, fetch_offset)))
    return encode_fetch_response(correlation_id=correlation_id, topics=list(by_topic.items()),
                                 session_id=session.session_id)
