"""gRPC servicer of the GroupCoordinator service: protobuf in, shard calls, protobuf out. Translation only.
The classic group protocol's methods are in ``classic_rpc.py``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Iterable
from typing import Any

from services.coordinator.classic_group import STABLE, ClassicGroup
from services.coordinator.classic_rpc import ClassicGroupRpcs, peer_host
from services.coordinator.classic_service import ClassicGroupService
from services.coordinator.consumer_protocol import PROTOCOL_TYPE, assigned_partitions, subscribed_topics
from services.coordinator.group import STATE_NAMES, ConsumerGroup, GroupError, fail
from services.coordinator.membership import HeartbeatRequest
from services.coordinator.runtime import CoordinatorRuntime, PartitionRuntime
from services.coordinator.shard import OffsetCommit
from shared.coordinator_lookup import find_coordinators
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.proto import coordinator_pb2_grpc as cpb_grpc
from shared.proto import tidelog_pb2 as pb
from shared.types import TopicPartition


def to_tps(items: Iterable[Any]) -> set[TopicPartition]:
    return {TopicPartition(t.topic, p) for t in items for p in t.partitions}


def from_tps(tps: Iterable[TopicPartition]) -> list[cpb.TopicPartitions]:
    by: dict[str, list[int]] = {}
    for tp in tps:
        by.setdefault(tp.topic, []).append(tp.partition)
    return [cpb.TopicPartitions(topic=t, partitions=sorted(ps)) for t, ps in sorted(by.items())]


#: Messages of commits one OffsetCommitStream may have in flight; the stream stops reading beyond it.
STREAM_IN_FLIGHT = 64


class GroupCoordinatorServicer(ClassicGroupRpcs, cpb_grpc.GroupCoordinatorServicer):
    def __init__(self, runtime: CoordinatorRuntime, classic: ClassicGroupService | None = None) -> None:
        self.rt = runtime
        self.classic = classic or ClassicGroupService(runtime)
        self.metrics: Any = None  # services.coordinator.metrics.CoordinatorMetrics when metrics are on

    async def FindCoordinator(self, request: pb.FindCoordinatorRequest, context: Any) -> pb.FindCoordinatorResponse:
        return find_coordinators(request.group_ids, self.rt.view.offsets_partitions, self.rt.view.owners)

    async def ConsumerGroupHeartbeat(self, request: cpb.ConsumerGroupHeartbeatRequest, context: Any) -> cpb.ConsumerGroupHeartbeatResponse:
        try:
            pr = self.rt.runtime_for(request.group_id)
            req = HeartbeatRequest(
                group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
                instance_id=request.instance_id or None, rack_id=request.rack_id or None,
                rebalance_timeout_ms=request.rebalance_timeout_ms or 300_000,
                subscribed_topic_names=list(request.subscribed_topic_names),
                subscribed_topic_regex=request.subscribed_topic_regex or None,
                server_assignor=request.server_assignor or None, owned=to_tps(request.owned_partitions),
                client_id=request.client_id, client_host=peer_host(context.peer() or ""))
            result, recs = pr.shard.heartbeat(req, self.rt.now_ms())
            await self.rt.write(pr, recs)
        except GroupError as exc:
            return cpb.ConsumerGroupHeartbeatResponse(error_code=exc.code, error_message=str(exc))
        resp = cpb.ConsumerGroupHeartbeatResponse(member_id=result.member_id, member_epoch=result.member_epoch,
                                                  heartbeat_interval_ms=result.heartbeat_interval_ms,
                                                  has_assignment=result.assignment is not None)
        if result.assignment is not None:
            resp.assignment.extend(from_tps(result.assignment))
        return resp

    async def OffsetCommit(self, request: cpb.OffsetCommitRequest, context: Any) -> cpb.OffsetCommitResponse:
        return await self._start_commit(request)

    def _start_commit(self, request: cpb.OffsetCommitRequest) -> Awaitable[cpb.OffsetCommitResponse]:
        """Check the commit and queue its records for writing now, so that commits are written in the
        order they are started; the awaitable gives the response once they are committed (the offsets
        are applied then, in write order, whoever awaits)."""
        commits = [OffsetCommit(TopicPartition(t.name, p.partition), p.committed_offset,
                                p.committed_leader_epoch if p.committed_leader_epoch else -1, p.committed_metadata)
                   for t in request.topics for p in t.partitions]
        started = time.perf_counter()
        try:
            pr = self.rt.runtime_for(request.group_id)
            errors, recs = pr.shard.commit_offsets(request.group_id, request.member_id, request.member_epoch, commits,
                                                   self.rt.now_ms(), request.group_instance_id or None)
            written = self.rt.submit(pr, recs)
        except GroupError as exc:
            return _answered(cpb.OffsetCommitResponse(error_code=exc.code, error_message=str(exc)))

        def apply(f: asyncio.Future[int]) -> None:  # runs in write order, whether or not anyone awaits
            if not f.cancelled() and f.exception() is None:
                pr.shard.apply_offsets(recs)

        written.add_done_callback(apply)
        return self._finish_commit(written, errors, started)

    async def _finish_commit(self, written: asyncio.Future[int], errors: dict[TopicPartition, int],
                             started: float) -> cpb.OffsetCommitResponse:
        try:
            await written
        except GroupError as exc:
            return cpb.OffsetCommitResponse(error_code=exc.code, error_message=str(exc))
        if self.metrics is not None:
            self.metrics.commits.inc()
            self.metrics.commit_time.observe(time.perf_counter() - started)
        return cpb.OffsetCommitResponse(topics=_topic_errors(errors))

    async def OffsetCommitStream(self, requests: AsyncIterator[cpb.OffsetCommitBatch],
                                 context: Any) -> AsyncIterator[cpb.OffsetCommitBatchResponse]:
        # Each commit is checked and queued for writing as it is read, so the writes keep the stream's
        # order whatever the brokers take; the answers go back in the same order as they complete.
        queue: asyncio.Queue[list[Awaitable[cpb.OffsetCommitResponse]] | None] = asyncio.Queue(STREAM_IN_FLIGHT)

        async def read() -> None:
            try:
                async for batch in requests:
                    await queue.put([self._start_commit(request) for request in batch.commits])
            finally:
                await queue.put(None)

        reader = asyncio.ensure_future(read())
        try:
            while (commits := await queue.get()) is not None:
                yield cpb.OffsetCommitBatchResponse(responses=[await commit for commit in commits])
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    async def OffsetFetch(self, request: cpb.OffsetFetchRequest, context: Any) -> cpb.OffsetFetchResponse:
        try:
            pr = self.rt.runtime_for(request.group_id)
        except GroupError as exc:
            return cpb.OffsetFetchResponse(error_code=exc.code, error_message=str(exc))
        wanted = to_tps(request.partitions) if request.partitions else None
        by: dict[str, list[cpb.OffsetFetchPartition]] = {}
        for tp, v in sorted(pr.shard.fetch_offsets(request.group_id, wanted).items()):
            part = (cpb.OffsetFetchPartition(partition=tp.partition, committed_offset=-1, committed_leader_epoch=-1)
                    if v is None else
                    cpb.OffsetFetchPartition(partition=tp.partition, committed_offset=v.offset, committed_leader_epoch=v.leader_epoch,
                                             metadata=v.metadata, commit_timestamp=v.commit_timestamp))
            by.setdefault(tp.topic, []).append(part)
        return cpb.OffsetFetchResponse(topics=[cpb.OffsetFetchTopic(name=t, partitions=ps) for t, ps in sorted(by.items())])

    async def OffsetDelete(self, request: cpb.OffsetDeleteRequest, context: Any) -> cpb.OffsetDeleteResponse:
        try:
            pr = self.rt.runtime_for(request.group_id)
            errors, recs = pr.shard.delete_offsets(request.group_id, to_tps(request.partitions))
            await self.rt.write(pr, recs)
            pr.shard.apply_offsets(recs)
        except GroupError as exc:
            return cpb.OffsetDeleteResponse(error_code=exc.code, error_message=str(exc))
        return cpb.OffsetDeleteResponse(topics=_topic_errors(errors))

    async def DescribeGroups(self, request: cpb.DescribeGroupsRequest, context: Any) -> cpb.DescribeGroupsResponse:
        resp = cpb.DescribeGroupsResponse()
        for gid in request.group_ids:
            try:
                pr = self.rt.runtime_for(gid)
                g = pr.shard.describe(gid)
                if g is None:
                    raise fail(ErrorCode.GROUP_ID_NOT_FOUND, f"group {gid!r} does not exist")
            except GroupError as exc:
                resp.groups.add(group_id=gid, error_code=exc.code, error_message=str(exc), state="Dead")
                continue
            if isinstance(g, ClassicGroup):
                _describe_classic(resp.groups.add(), g, pr)
            else:
                _describe_consumer(resp.groups.add(), g, pr)
        return resp

    async def ListGroups(self, request: cpb.ListGroupsRequest, context: Any) -> cpb.ListGroupsResponse:
        resp = cpb.ListGroupsResponse()
        for pr in list(self.rt.partitions.values()):
            if not pr.loaded:
                continue
            for gid in pr.shard.group_ids():
                g = pr.shard.describe(gid)
                if isinstance(g, ClassicGroup):
                    resp.groups.add(group_id=gid, state=g.state, members=len(g.members),
                                    protocol_type=g.protocol_type or "", group_type="classic")
                else:
                    resp.groups.add(group_id=gid, state=g.state if g else "Empty", members=len(g.members) if g else 0,
                                    protocol_type=PROTOCOL_TYPE, group_type="consumer")
        return resp

    async def DeleteGroups(self, request: cpb.DeleteGroupsRequest, context: Any) -> cpb.DeleteGroupsResponse:
        resp = cpb.DeleteGroupsResponse()
        for gid in request.group_ids:
            try:
                pr = self.rt.runtime_for(gid)
                recs = pr.shard.delete_group(gid)
                await self.rt.write(pr, recs)
                pr.shard.apply_offsets(recs)
                resp.results.add(group_id=gid)
            except GroupError as exc:
                resp.results.add(group_id=gid, error_code=exc.code, error_message=str(exc))
        return resp


def _describe_consumer(dg: cpb.DescribedGroup, g: ConsumerGroup, pr: PartitionRuntime) -> None:
    dg.MergeFrom(cpb.DescribedGroup(group_id=g.group_id, state=g.state, group_epoch=g.epoch,
                                    assignment_epoch=g.target_epoch, assignor=g.assignor_name(),
                                    coordinator_partition=pr.partition, protocol_type=PROTOCOL_TYPE,
                                    group_type="consumer"))
    for m in sorted(g.members.values(), key=lambda m: m.member_id):
        dg.members.add(member_id=m.member_id, instance_id=m.instance_id or "", client_id=m.client_id,
                       client_host=m.client_host, member_epoch=m.epoch, state=STATE_NAMES.get(m.state, "UNKNOWN"),
                       assignment=from_tps(m.assigned), target_assignment=from_tps(g.target.get(m.member_id, ())),
                       subscribed_topic_names=m.subscribed_topics, subscribed_topic_regex=m.regex or "")


def _describe_classic(dg: cpb.DescribedGroup, g: ClassicGroup, pr: PartitionRuntime) -> None:
    """Kafka's DescribeGroups of a classic group (members' metadata only once Stable), plus the topics and
    partitions read from the consumer protocol's bytes."""
    dg.MergeFrom(cpb.DescribedGroup(group_id=g.group_id, state=g.state, group_epoch=g.generation,
                                    assignment_epoch=g.generation, assignor=g.protocol_name or "",
                                    coordinator_partition=pr.partition, protocol_type=g.protocol_type or "",
                                    group_type="classic"))
    consumer = g.protocol_type == PROTOCOL_TYPE
    for m in g.members.values():
        metadata = m.metadata(g.protocol_name) if g.state == STABLE else b""
        tps = assigned_partitions(m.assignment) if consumer else None
        topics = subscribed_topics(m.metadata(g.protocol_name)) if consumer and g.protocol_name else None
        dg.members.add(member_id=m.member_id, instance_id=m.instance_id or "", client_id=m.client_id,
                       client_host=m.client_host, member_epoch=g.generation, member_metadata=metadata,
                       member_assignment=m.assignment, assignment=from_tps(tps or ()),
                       subscribed_topic_names=sorted(topics or ()))


def _topic_errors(errors: dict[TopicPartition, int]) -> list[cpb.TopicErrors]:
    by: dict[str, list[cpb.PartitionError]] = {}
    for tp, code in sorted(errors.items()):
        by.setdefault(tp.topic, []).append(cpb.PartitionError(partition=tp.partition, error_code=code))
    return [cpb.TopicErrors(name=t, partitions=ps) for t, ps in sorted(by.items())]


async def _answered(resp: cpb.OffsetCommitResponse) -> cpb.OffsetCommitResponse:
    return resp
