"""Consumer-group administration for the REST API: asks the coordinator instances (found
through their ownership keys in etcd) and the partition leaders (for log end offsets).
Computes ``kafka-consumer-groups.sh --reset-offsets`` plans."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from shared.errors import ErrorCode, TidelogError
from shared.metadata.keys import Keys
from shared.metadata.store import MetadataStore
from shared.metadata.types import PartitionState, TopicRecord
from shared.offsets_topic import OFFSETS_TOPIC, locate
from shared.proto import coordinator_pb2 as cpb
from shared.proto import coordinator_pb2_grpc as cpb_grpc
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.security.transport import aio_channel
from shared.types import TopicPartition

RETRY = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE})
RESET_KINDS = ("earliest", "latest", "timestamp", "offset", "shift-by")


def tps_of(items: Any) -> list[TopicPartition]:
    return [TopicPartition(t.topic, p) for t in items for p in t.partitions]


class GroupAdmin:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.keys: Keys = store.keys

    # -- plumbing ------------------------------------------------------------------------------------

    async def _coordinator(self, group_id: str) -> cpb_grpc.GroupCoordinatorStub:
        topic = await self.store.get(self.keys.topic(OFFSETS_TOPIC))
        if topic is None:
            raise TidelogError("__consumer_offsets does not exist yet", code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        owners = {int(Keys.last_segment(k)): v for k, (v, _, _) in (await self.store.get_prefix(self.keys.offsets_owners_prefix())).items()}
        p, owner = locate(group_id, len(TopicRecord.from_json(topic[0]).assignment), owners)
        if owner is None:
            raise TidelogError(f"no coordinator owns partition {p}", code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return cpb_grpc.GroupCoordinatorStub(aio_channel(str(owner["address"])))

    async def groups_can_exist(self) -> bool:
        """False before ``__consumer_offsets`` exists: no group was ever stored, none can be found
        (a cluster without coordinators, or one just starting)."""
        return await self.store.get(self.keys.topic(OFFSETS_TOPIC)) is not None

    async def _require_offsets_topic(self, group_id: str) -> None:
        if not await self.groups_can_exist():
            raise TidelogError(f"group {group_id!r} does not exist (no __consumer_offsets yet)",
                               code=ErrorCode.GROUP_ID_NOT_FOUND)

    async def call(self, group_id: str, method: str, request: Any, attempts: int = 20) -> Any:
        last: Any = None
        for _ in range(attempts):
            try:
                resp = await getattr(await self._coordinator(group_id), method)(request, timeout=10)
            except (grpc.aio.AioRpcError, TidelogError) as exc:
                last = exc
            else:
                code = getattr(resp, "error_code", 0)
                if code not in RETRY:
                    return resp
                last = resp.error_message
            await asyncio.sleep(0.25)
        raise TidelogError(f"{method} for group {group_id!r}: {last}", code=ErrorCode.COORDINATOR_NOT_AVAILABLE)

    async def list_offsets(self, tps: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        """ListOffsets at each partition's leader: -2 earliest, -1 latest, else by timestamp (-1 if none)."""
        brokers = {int(v["id"]): v["address"] for v, _, _ in (await self.store.get_prefix(self.keys.brokers_prefix())).values()}
        out: dict[TopicPartition, int] = {}
        for tp in tps:
            st = await self.store.get(self.keys.partition(tp.topic, tp.partition))
            addr = brokers.get(PartitionState.from_json(st[0]).leader) if st else None
            if addr is None:
                out[tp] = -1
                continue
            async with aio_channel(addr) as ch:
                resp = await pb_grpc.BrokerStub(ch).ListOffsets(pb.ListOffsetsRequest(replica_id=-1, topics=[
                    pb.ListOffsetsTopic(name=tp.topic, partitions=[pb.ListOffsetsPartition(partition=tp.partition, timestamp=timestamp)])]),
                    timeout=10)
            p = resp.topics[0].partitions[0]
            out[tp] = p.offset if p.error_code == 0 else -1
        return out

    # -- operations ---------------------------------------------------------------------------------

    async def list_groups(self) -> list[dict[str, Any]]:
        instances = await self.store.get_prefix(self.keys.services_prefix("coordinator"))
        groups: dict[str, dict[str, Any]] = {}
        for v, _, _ in instances.values():
            try:
                async with aio_channel(v["address"]) as ch:
                    resp = await cpb_grpc.GroupCoordinatorStub(ch).ListGroups(cpb.ListGroupsRequest(), timeout=5)
            except grpc.aio.AioRpcError:
                continue
            for g in resp.groups:
                groups[g.group_id] = {"group_id": g.group_id, "state": g.state, "members": g.members,
                                      "group_type": g.group_type or "consumer"}
        return [groups[k] for k in sorted(groups)]

    async def committed(self, group_id: str) -> dict[TopicPartition, int]:
        resp = await self.call(group_id, "OffsetFetch", cpb.OffsetFetchRequest(group_id=group_id))
        return {TopicPartition(t.name, p.partition): p.committed_offset for t in resp.topics for p in t.partitions
                if p.committed_offset >= 0}

    async def describe(self, group_id: str) -> dict[str, Any]:
        await self._require_offsets_topic(group_id)
        resp = await self.call(group_id, "DescribeGroups", cpb.DescribeGroupsRequest(group_ids=[group_id]))
        g = resp.groups[0]
        if g.error_code:
            raise TidelogError(g.error_message, code=ErrorCode(g.error_code))
        committed = await self.committed(group_id)
        owner = {tp: m.member_id for m in g.members for tp in tps_of(m.assignment)}
        tps = sorted(set(committed) | set(owner))
        ends = await self.list_offsets(tps, -1)
        partitions = [{"topic": tp.topic, "partition": tp.partition, "committed_offset": committed.get(tp),
                       "log_end_offset": ends.get(tp, -1), "member_id": owner.get(tp),
                       "lag": (ends[tp] - committed[tp]) if tp in committed and ends.get(tp, -1) >= 0 else None}
                      for tp in tps]
        members = [{"member_id": m.member_id, "instance_id": m.instance_id or None, "client_id": m.client_id,
                    "host": m.client_host, "member_epoch": m.member_epoch, "state": m.state,
                    "partitions": [f"{tp.topic}-{tp.partition}" for tp in sorted(tps_of(m.assignment))]}
                   for m in g.members]
        # A classic group: group_epoch is its generation and assignor the protocol its members chose.
        return {"group_id": g.group_id, "state": g.state, "group_epoch": g.group_epoch,
                "assignment_epoch": g.assignment_epoch, "assignor": g.assignor,
                "group_type": g.group_type or "consumer", "protocol_type": g.protocol_type,
                "coordinator_partition": g.coordinator_partition, "members": members, "partitions": partitions}

    async def delete(self, group_id: str) -> None:
        await self._require_offsets_topic(group_id)
        resp = await self.call(group_id, "DeleteGroups", cpb.DeleteGroupsRequest(group_ids=[group_id]))
        r = resp.results[0]
        if r.error_code:
            raise TidelogError(r.error_message, code=ErrorCode(r.error_code))

    async def reset_offsets(self, group_id: str, tps: list[TopicPartition], kind: str, value: int | None,
                            execute: bool) -> list[dict[str, Any]]:
        """New offsets as kafka-consumer-groups.sh --reset-offsets computes them, committed if ``execute``
        (a dry run needs no coordinator before ``__consumer_offsets`` exists: nothing is committed yet)."""
        current: dict[TopicPartition, int] = {}
        if execute or await self.groups_can_exist():
            described = await self.call(group_id, "DescribeGroups", cpb.DescribeGroupsRequest(group_ids=[group_id]))
            g = described.groups[0]
            if g.error_code == 0 and g.members:
                raise TidelogError(f"group {group_id!r} has {len(g.members)} members; stop them first",
                                   code=ErrorCode.NON_EMPTY_GROUP)
            current = await self.committed(group_id) if g.error_code == 0 else {}
        low, high = await self.list_offsets(tps, -2), await self.list_offsets(tps, -1)
        if kind == "timestamp":
            by_time = await self.list_offsets(tps, int(value or 0))
        plan = []
        for tp in tps:
            if kind == "earliest":
                new = low[tp]
            elif kind == "latest":
                new = high[tp]
            elif kind == "timestamp":
                new = by_time[tp] if by_time[tp] >= 0 else high[tp]
            elif kind == "offset":
                new = int(value or 0)
            else:
                new = current.get(tp, high[tp]) + int(value or 0)
            new = max(low[tp], min(high[tp], new))
            plan.append({"topic": tp.topic, "partition": tp.partition, "current_offset": current.get(tp), "new_offset": new})
        if execute and plan:
            by: dict[str, list[cpb.OffsetCommitPartition]] = {}
            for row in plan:
                by.setdefault(row["topic"], []).append(cpb.OffsetCommitPartition(
                    partition=row["partition"], committed_offset=row["new_offset"], committed_leader_epoch=-1))
            resp = await self.call(group_id, "OffsetCommit", cpb.OffsetCommitRequest(
                group_id=group_id, member_epoch=-1, topics=[cpb.OffsetCommitTopic(name=t, partitions=ps) for t, ps in by.items()]))
            if resp.error_code:
                raise TidelogError(resp.error_message, code=ErrorCode(resp.error_code))
        return plan

    async def partitions_of(self, topic: str, partitions: list[int] | None) -> list[TopicPartition]:
        got = await self.store.get(self.keys.topic(topic))
        if got is None:
            raise TidelogError(f"topic {topic!r} does not exist", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        count = len(TopicRecord.from_json(got[0]).assignment)
        wanted = partitions if partitions else list(range(count))
        bad = [p for p in wanted if not 0 <= p < count]
        if bad:
            raise TidelogError(f"topic {topic!r} has no partition {bad[0]}", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return [TopicPartition(topic, p) for p in sorted(set(wanted))]
