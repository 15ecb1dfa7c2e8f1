"""Followers copy their leaders' logs: one fetcher task per leader broker.

Before fetching a partition (after every leadership change) the follower asks
the leader where the history of its latest local epoch ends
(OffsetsForLeaderEpoch) and truncates anything past that point: a divergent
tail is removed by epoch history, never by high watermark alone. Then it
fetches from its log end offset with its replica id, current leader epoch and
log start offset, appends at the leader's offsets and takes the leader's high
watermark and log start offset; a log start offset moved that way is named in the
next request (the leader's low watermark, which DeleteRecords waits for, needs it).

Fetches run in a fetch session (``fetch_sessions``, Kafka's KIP-227): after a full first request, a
request names only the partitions whose position changed, and the leader answers only partitions with
news, so an idle follower of thousands of partitions costs O(changed) per round trip. Every event that
can change a partition's position marks it (``FollowerSession.mark``); a new stream, a failed request
or a session error makes the next request full again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from services.broker.fetch_reader import broker_epoch
from services.broker.fetch_sessions import FetchPlan, FollowerSession, Position
from services.broker.replication_rules import truncation_offset
from services.broker.replication_throttle import ReplicationThrottles
from shared.errors import ErrorCode, TidelogError
from shared.netprobe import tcp_reachable_async
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.security.transport import aio_channel
from shared.service import GRPC_OPTIONS
from shared.types import TopicPartition

if TYPE_CHECKING:
    from services.broker.partition import Partition
    from services.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


#: How long a partition whose fetch or epoch lookup failed sits out (Kafka: replica.fetch.backoff.ms, 1 s);
#: the others keep fetching. Without it, one partition in error made every round return at once:
#: a hot loop of full fetches over every followed partition.
PARTITION_BACKOFF_S = 0.5


@dataclass
class FollowState:
    leader_epoch: int
    truncated: bool = False
    retry_at: float = 0.0  # loop time before which this partition is left out of requests
    sent_log_start: int = -1  # the log start offset the last request naming this partition carried

    def back_off(self, now: float) -> None:
        self.retry_at = now + PARTITION_BACKOFF_S


class ReplicaFetcher:
    def __init__(self, rm: ReplicaManager, leader_id: int, address: str, *, max_wait_ms: int = 500,
                 max_bytes: int = 16 * 1024 * 1024, partition_max_bytes: int = 8 * 1024 * 1024) -> None:
        self.rm = rm
        self.leader_id = leader_id
        self.address = address
        self.max_wait_ms = max_wait_ms
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.partitions: dict[TopicPartition, FollowState] = {}
        self._wake = asyncio.Event()
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.BrokerStub | None = None
        self._stream: Any = None  # a FetchStream call: one request, one response, far cheaper than unary calls
        self.session = FollowerSession()  # the fetch session on that stream
        self._to_truncate: set[TopicPartition] = set()  # awaiting the divergence check (OffsetsForLeaderEpoch)
        self._backing_off: set[TopicPartition] = set()  # left out of requests until their retry time
        self._throttled: set[TopicPartition] = set()  # left out while the follower replication quota is exceeded
        self._task = asyncio.ensure_future(self._run())

    async def _connect(self) -> bool:
        """A channel to the leader, dialled only once a plain TCP probe succeeds (see shared.netprobe)."""
        if self._channel is not None:
            return True
        if not await tcp_reachable_async(self.address):
            return False
        self._channel = aio_channel(self.address, options=GRPC_OPTIONS)
        self._stub = pb_grpc.BrokerStub(self._channel)
        return True

    async def _disconnect(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            stream.cancel()
        if self._channel is not None:
            channel, self._channel, self._stub = self._channel, None, None
            with contextlib.suppress(Exception):
                await channel.close(grace=0.5)

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        st = self.partitions.get(tp)
        if st is None or st.leader_epoch != leader_epoch:
            self.partitions[tp] = FollowState(leader_epoch)
            self._to_truncate.add(tp)
            self.session.mark(tp)
            self._wake.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)
        self._to_truncate.discard(tp)
        self._backing_off.discard(tp)
        self.session.mark(tp)

    def _back_off(self, tp: TopicPartition, st: FollowState) -> None:
        st.back_off(asyncio.get_running_loop().time())
        self._backing_off.add(tp)
        self.session.mark(tp)

    def _untruncate(self, tp: TopicPartition, st: FollowState) -> None:
        """Check the divergence from the leader again before fetching ``tp`` further."""
        st.truncated = False
        self._to_truncate.add(tp)
        self.session.mark(tp)

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.wait([self._task], timeout=2)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._disconnect(), 2)

    async def _run(self) -> None:
        backoff = 0.05
        while True:
            if not self.partitions:
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 1.0)
                continue
            try:
                if not await self._connect():
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 1.0)
                    continue
                await self._truncate_pending()
                await self._fetch_once()
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as exc:
                log.debug("fetch from leader %s failed: %s", self.leader_id, exc.code())
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    await self._disconnect()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
            except Exception:
                log.exception("replica fetcher error", extra={"leader": self.leader_id})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    def _partition(self, tp: TopicPartition) -> Partition | None:
        part = self.rm.partitions.get(tp)
        if part is None or part.is_leader or part.leader_id != self.leader_id:
            return None
        return part

    async def _truncate_pending(self) -> None:
        now = asyncio.get_running_loop().time()
        pending = {tp: st for tp in self._to_truncate
                   if (st := self.partitions.get(tp)) is not None and not st.truncated and st.retry_at <= now}
        if not pending:
            return
        topics: dict[str, list[pb.EpochPartition]] = {}
        for tp, st in pending.items():
            part = self._partition(tp)
            if part is None:
                continue
            topics.setdefault(tp.topic, []).append(pb.EpochPartition(
                partition=tp.partition, current_leader_epoch=st.leader_epoch, leader_epoch=part.log.epochs.latest_epoch))
        if not topics:
            return
        assert self._stub is not None
        resp = await self._stub.OffsetsForLeaderEpoch(pb.OffsetsForLeaderEpochRequest(
            replica_id=self.rm.broker_id, topics=[pb.EpochTopic(name=t, partitions=ps) for t, ps in topics.items()]),
            timeout=10)
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition)
                part = self._partition(tp)
                st = self.partitions.get(tp)
                if part is None or st is None:
                    continue
                if p.error_code:
                    self._back_off(tp, st)  # not ready (leader still loading, stale epoch): retry a little later
                    continue
                self._truncate(part, p.leader_epoch, p.end_offset)
                st.truncated = True
                self._to_truncate.discard(tp)
                self.session.mark(tp)

    def _truncate(self, part: Partition, leader_epoch: int, end_offset: int) -> None:
        leo = part.log_end_offset
        target = truncation_offset(part.log.epochs.entries, leo, part.high_watermark, leader_epoch, end_offset)
        if target < leo:
            log.info("truncating divergent tail", extra={"tp": str(part.tp), "from": leo, "to": target,
                                                          "leader_epoch": leader_epoch})
            part.truncate_to(target)

    def _follower_throttle(self, tp: TopicPartition, part: Partition) -> ReplicationThrottles | None:
        """The broker's throttles if ``tp`` is a throttled replica here (follower.replication.throttled.*)."""
        throttle: ReplicationThrottles | None = getattr(self.rm, "replication_throttle", None)
        if throttle is None or not throttle.follower.limited \
                or not throttle.follower_throttled(part.log.config.extra, tp.partition, part.isr):
            return None
        return throttle

    def _position(self, tp: TopicPartition, now: float) -> Position | None:
        """Where ``tp`` is fetched from, or None while it is not fetched (truncation pending, backing off,
        throttled with the follower replication quota used up)."""
        st = self.partitions.get(tp)
        part = self._partition(tp)
        if st is None or part is None or not st.truncated or st.retry_at > now:
            return None
        throttle = self._follower_throttle(tp, part)
        if throttle is not None and throttle.follower.exceeded():
            self._throttled.add(tp)
            return None
        return Position(part.log_end_offset, st.leader_epoch, part.log.log_start_offset)

    def _request(self) -> tuple[FetchPlan, pb.FetchRequest]:
        """The next request of the session: full after a reset, else only what changed."""
        now = asyncio.get_running_loop().time()
        for tp in [tp for tp in self._backing_off if tp not in self.partitions or self.partitions[tp].retry_at <= now]:
            self._backing_off.discard(tp)
            self.session.mark(tp)
        for tp in self._throttled:  # asked again: still left out while the quota is used up
            self.session.mark(tp)
        self._throttled = set()
        plan = self.session.plan(lambda tp: self._position(tp, now), self.partitions)
        topics: dict[str, list[pb.FetchPartition]] = {}
        for tp, pos in plan.upserts.items():
            if (st := self.partitions.get(tp)) is not None:
                st.sent_log_start = pos.log_start_offset
            max_bytes = self.partition_max_bytes
            if (part := self._partition(tp)) is not None and (throttle := self._follower_throttle(tp, part)):
                max_bytes = max(1, throttle.follower.allowance(max_bytes))  # at most what the quota has left
            topics.setdefault(tp.topic, []).append(pb.FetchPartition(
                partition=tp.partition, fetch_offset=pos.fetch_offset, partition_max_bytes=max_bytes,
                current_leader_epoch=pos.leader_epoch, log_start_offset=pos.log_start_offset))
        forgotten: dict[str, list[pb.FetchPartition]] = {}
        for tp in plan.forgotten:
            forgotten.setdefault(tp.topic, []).append(pb.FetchPartition(partition=tp.partition))
        req = pb.FetchRequest(replica_id=self.rm.broker_id, replica_epoch=broker_epoch(self.rm.incarnation),
                              max_wait_ms=self.max_wait_ms, min_bytes=1,
                              max_bytes=self.max_bytes, session_id=plan.session_id, session_epoch=plan.epoch,
                              topics=[pb.FetchTopic(name=t, partitions=ps) for t, ps in topics.items()],
                              forgotten_topics=[pb.FetchTopic(name=t, partitions=ps) for t, ps in forgotten.items()])
        return plan, req

    async def _fetch_once(self) -> None:
        if self._stream is None:
            self.session.reset()  # a new stream: the leader holds no session for us
        plan, req = self._request()
        try:
            resp = await self._fetch_call(req)
        except BaseException:
            self.session.reset()
            raise
        if not self.session.on_response(plan, resp.error_code, resp.session_id):
            log.info("fetch session reset", extra={"leader": self.leader_id, "error": ErrorCode(resp.error_code).name})
            return
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition)
                part = self._partition(tp)
                st = self.partitions.get(tp)
                held = self.session.sent.get(tp)
                if part is None or st is None or held is None or st.leader_epoch != held[1]:
                    continue  # no longer ours at that epoch: marked already, the next request says so
                self.session.mark(tp)  # its position may move now
                if p.fetch_offset != part.log_end_offset and not p.error_code:
                    continue  # not read where our log ends (truncated meanwhile): the next request corrects it
                self._handle(tp, part, st, p)

    async def _fetch_call(self, req: pb.FetchRequest) -> pb.FetchResponse:
        """One fetch over the long-lived FetchStream (opened on first use, dropped on any error)."""
        assert self._stub is not None
        if self._stream is None:
            self._stream = self._stub.FetchStream()
        stream = self._stream
        try:
            await stream.write(req)
            resp = await asyncio.wait_for(stream.read(), self.max_wait_ms / 1000 + 10)
        except BaseException:
            if self._stream is stream:
                self._stream = None
                stream.cancel()
            raise
        if resp is grpc.aio.EOF:
            self._stream = None
            raise ConnectionError(f"fetch stream to leader {self.leader_id} ended")
        return resp

    def _handle(self, tp: TopicPartition, part: Partition, st: FollowState, p: pb.FetchPartitionResponse) -> None:
        if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if part.log_end_offset < p.log_start_offset:
                part.truncate_fully_and_start_at(p.log_start_offset)  # the leader deleted what we lack
            else:
                self._untruncate(tp, st)  # we are ahead of the leader: find the divergence again
            return
        if p.error_code:
            if p.error_code in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                ErrorCode.UNKNOWN_LEADER_EPOCH):
                self._untruncate(tp, st)  # wait for metadata; re-check divergence against the new leader
            self._back_off(tp, st)
            return
        if p.records:
            try:
                part.append_as_follower(p.records)
            except TidelogError as exc:
                log.warning("follower append failed", extra={"tp": str(part.tp), "error": str(exc)})
                self._untruncate(tp, st)
                return
            if (throttle := self._follower_throttle(tp, part)) is not None:
                throttle.follower.record(len(p.records))
        part.follower_update_hw(p.high_watermark)
        part.follower_update_log_start(p.log_start_offset)  # records deleted on the leader go here too
        if part.log.log_start_offset != st.sent_log_start:
            self._resend(tp)

    def _resend(self, tp: TopicPartition) -> None:
        """Name ``tp`` in the next request although its fetch position may not have moved: the leader learns
        our log start offset (moved by its answer or by our own retention) from it, and its low watermark,
        which DeleteRecords waits for, is the smallest over the replicas (Kafka's fetch session likewise
        sends a partition whose log start offset changed). The session compares positions without the log
        start offset, so the one it holds is made stale."""
        held = self.session.sent.get(tp)
        if held is not None:
            self.session.sent[tp] = (-1, held[1])  # no real position: the next plan upserts tp
        self.session.mark(tp)
