"""Classic groups (Kafka's JoinGroup/SyncGroup/Heartbeat/LeaveGroup) on real processes, through the
coordinator's gRPC methods as a broker forwards them: two members join, the leader assigns, both
heartbeat and commit, one leaves and the other rebalances alone; the REST API and `tidelog groups`
show the group; the generation survives a coordinator crash (the group's records are replayed)."""

from __future__ import annotations

import os
import signal
from typing import Any

import grpc
import httpx
from click.testing import CliRunner
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from shared.cli.main import cli
from shared.client import Admin
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.proto import coordinator_pb2_grpc as cpb_grpc
from tests.conftest import wait_for
from tests.integration.test_groups import GROUP_ENV, find_coordinator, produce

ENV = {**GROUP_ENV, "TIDELOG_GROUP_INITIAL_REBALANCE_DELAY_MS": "500", "TIDELOG_GROUP_MIN_SESSION_TIMEOUT_MS": "1000"}
GROUP = "classic-g"
TOPIC = "orders"
MOVED = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE)


def subscription() -> bytes:
    return ConsumerProtocolSubscription(version=0, topics=[TOPIC], user_data=None).encode()


def assignment(*partitions: int) -> bytes:
    return ConsumerProtocolAssignment(version=0, assigned_partitions=[(TOPIC, list(partitions))],
                                      user_data=b"").encode()


def join_request(member_id: str = "", client_id: str = "app") -> cpb.JoinGroupRequest:
    return cpb.JoinGroupRequest(group_id=GROUP, session_timeout_ms=30_000, rebalance_timeout_ms=10_000,
                                member_id=member_id, protocol_type="consumer", client_id=client_id, api_version=9,
                                protocols=[cpb.JoinGroupProtocol(name="range", metadata=subscription())])


def new_member(stub: cpb_grpc.GroupCoordinatorStub, client_id: str) -> str:
    first = stub.JoinGroup(join_request(client_id=client_id), timeout=10)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id.startswith(f"{client_id}-"), first
    return first.member_id


def heartbeat(stub: cpb_grpc.GroupCoordinatorStub, member_id: str, generation: int) -> int:
    return stub.Heartbeat(cpb.HeartbeatRequest(group_id=GROUP, member_id=member_id, generation_id=generation),
                          timeout=10).error_code


def commit(stub: cpb_grpc.GroupCoordinatorStub, member_id: str, generation: int, offset: int) -> cpb.OffsetCommitResponse:
    return stub.OffsetCommit(cpb.OffsetCommitRequest(group_id=GROUP, member_id=member_id, member_epoch=generation, topics=[
        cpb.OffsetCommitTopic(name=TOPIC, partitions=[cpb.OffsetCommitPartition(partition=p, committed_offset=offset)
                                                      for p in range(4)])]), timeout=10)


def test_two_members_join_assign_heartbeat_leave_and_rebalance(make_cluster: Any) -> None:
    c = make_cluster(controllers=1, brokers=1, coordinators=1, cleaners=0, quotas=0, extra_env=ENV)
    bootstrap = ",".join(p.address for p in c.procs("broker"))
    admin = Admin(bootstrap)
    admin.create_topic(TOPIC, partitions=4)
    node = find_coordinator(bootstrap, GROUP)
    stub = cpb_grpc.GroupCoordinatorStub(grpc.insecure_channel(node.address))
    wait_for(lambda: stub.OffsetFetch(cpb.OffsetFetchRequest(group_id=GROUP), timeout=10).error_code == 0,
             30, what="the coordinator serving the group")

    # Two members join (each after its MEMBER_ID_REQUIRED round trip); both calls wait for the join phase.
    a, b = new_member(stub, "a"), new_member(stub, "b")
    join_a = stub.JoinGroup.future(join_request(a, "a"), timeout=30)
    join_b = stub.JoinGroup.future(join_request(b, "b"), timeout=30)
    ra, rb = join_a.result(), join_b.result()
    assert ra.error_code == rb.error_code == 0, (ra, rb)
    assert ra.generation_id == rb.generation_id == 1 and ra.leader == rb.leader == a
    assert ra.protocol_type == "consumer" and ra.protocol_name == "range"
    assert sorted(m.member_id for m in ra.members) == sorted([a, b]) and not rb.members  # the leader's only
    assert all(ConsumerProtocolSubscription.decode(m.metadata).topics == [TOPIC] for m in ra.members)

    # The follower's SyncGroup waits for the leader's assignment.
    sync_b = stub.SyncGroup.future(cpb.SyncGroupRequest(group_id=GROUP, generation_id=1, member_id=b), timeout=30)
    sync_a = stub.SyncGroup(cpb.SyncGroupRequest(
        group_id=GROUP, generation_id=1, member_id=a, protocol_type="consumer", protocol_name="range",
        assignments=[cpb.SyncGroupAssignment(member_id=a, assignment=assignment(0, 1)),
                     cpb.SyncGroupAssignment(member_id=b, assignment=assignment(2, 3))]), timeout=30)
    got_b = sync_b.result()
    assert sync_a.error_code == got_b.error_code == 0
    assert ConsumerProtocolAssignment.decode(got_b.assignment).partitions() == [(TOPIC, 2), (TOPIC, 3)]
    assert heartbeat(stub, a, 1) == heartbeat(stub, b, 1) == ErrorCode.NONE
    assert heartbeat(stub, a, 0) == ErrorCode.ILLEGAL_GENERATION

    # Commits are fenced by generation; a KIP-848 member cannot join the classic group.
    assert commit(stub, a, 0, 0).error_code == ErrorCode.ILLEGAL_GENERATION
    assert commit(stub, a, 1, 0).error_code == 0
    kip848 = stub.ConsumerGroupHeartbeat(cpb.ConsumerGroupHeartbeatRequest(
        group_id=GROUP, member_epoch=0, subscribed_topic_names=[TOPIC]), timeout=10)
    assert kip848.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL

    # What operators see: ListGroups / DescribeGroups, the REST API and `tidelog groups`.
    listed = {g.group_id: g for g in stub.ListGroups(cpb.ListGroupsRequest(), timeout=10).groups}
    assert (listed[GROUP].state, listed[GROUP].members, listed[GROUP].group_type) == ("Stable", 2, "classic")
    described = stub.DescribeGroups(cpb.DescribeGroupsRequest(group_ids=[GROUP]), timeout=10).groups[0]
    assert (described.group_type, described.protocol_type, described.assignor) == ("classic", "consumer", "range")
    assert {m.member_id: [p for t in m.assignment for p in t.partitions] for m in described.members} == {
        a: [0, 1], b: [2, 3]}
    produce(bootstrap, TOPIC, 40)
    rest = httpx.get(f"{c.rest}/v1/groups/{GROUP}", timeout=10).json()
    assert rest["group_type"] == "classic" and rest["state"] == "Stable" and len(rest["members"]) == 2
    rows = {p["partition"]: p for p in rest["partitions"]}
    assert sorted(rows) == [0, 1, 2, 3] and rows[2]["member_id"] == b
    assert sum(p["lag"] for p in rows.values()) == 40  # committed at 0
    out = CliRunner().invoke(cli, ["groups", "describe", GROUP, "--rest", c.rest, "--bootstrap-server", bootstrap])
    assert out.exit_code == 0 and "Type: classic" in out.output and a in out.output, out.output

    # b leaves: a is told to rejoin, and alone it completes the next generation at once.
    left = stub.LeaveGroup(cpb.LeaveGroupRequest(group_id=GROUP, members=[cpb.LeaveGroupMember(member_id=b)]), timeout=10)
    assert left.error_code == 0 and [m.error_code for m in left.members] == [0]
    assert heartbeat(stub, a, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    again = stub.JoinGroup(join_request(a, "a"), timeout=30)
    assert again.error_code == 0 and again.generation_id == 2 and [m.member_id for m in again.members] == [a]
    alone = stub.SyncGroup(cpb.SyncGroupRequest(group_id=GROUP, generation_id=2, member_id=a, assignments=[
        cpb.SyncGroupAssignment(member_id=a, assignment=assignment(0, 1, 2, 3))]), timeout=30)
    assert alone.error_code == 0 and len(ConsumerProtocolAssignment.decode(alone.assignment).partitions()) == 4
    assert heartbeat(stub, b, 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert commit(stub, a, 1, 2).error_code == ErrorCode.ILLEGAL_GENERATION
    assert commit(stub, a, 2, 2).error_code == 0

    # The coordinator crashes: its successor loads the group from __consumer_offsets, generation included.
    proc = c.procs("coordinator")[0]
    os.kill(proc.pid, signal.SIGKILL)
    proc.popen.wait()
    c.restart("coordinator", 1)

    def served() -> tuple[int] | None:
        try:
            address = find_coordinator(bootstrap, GROUP).address
            code = heartbeat(cpb_grpc.GroupCoordinatorStub(grpc.insecure_channel(address)), a, 2)
        except grpc.RpcError:
            return None
        return None if code in MOVED else (code,)

    assert wait_for(served, 60, what="the group served again") == (ErrorCode.NONE,)
    stub = cpb_grpc.GroupCoordinatorStub(grpc.insecure_channel(find_coordinator(bootstrap, GROUP).address))
    fetched = stub.OffsetFetch(cpb.OffsetFetchRequest(group_id=GROUP), timeout=10)
    assert [p.committed_offset for t in fetched.topics for p in t.partitions] == [2, 2, 2, 2]
    # a leaves: the group is Empty and takes commits from outside the group protocol again.
    assert stub.LeaveGroup(cpb.LeaveGroupRequest(group_id=GROUP, members=[cpb.LeaveGroupMember(member_id=a)]),
                           timeout=10).members[0].error_code == 0
    assert stub.DescribeGroups(cpb.DescribeGroupsRequest(group_ids=[GROUP]), timeout=10).groups[0].state == "Empty"
    assert commit(stub, "", -1, 3).error_code == 0
    admin.close()
