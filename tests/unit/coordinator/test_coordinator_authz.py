"""The coordinator's ACLs (issue 23), with a real ``Authorizer`` behind ``Access``: every method of the
GroupCoordinator and TransactionCoordinator services refuses a principal without rights (a method added
later without a rule fails here), membership and offsets need GROUP READ (and TOPIC READ / DESCRIBE),
DescribeGroups hands no member ids to a principal that may not describe the group, transactions need
TRANSACTIONAL_ID WRITE, and the internal RPCs need the right service certificate. Plaintext (no
security) allows everything, as the other unit tests show."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from services.coordinator.api import CoordinatorApi
from services.coordinator.api.complete_txn_offsets import complete_txn_offsets
from services.coordinator.api.consumer_group_heartbeat import consumer_group_heartbeat
from services.coordinator.api.delete_groups import delete_groups
from services.coordinator.api.describe_groups import describe_groups
from services.coordinator.api.list_groups import list_groups
from services.coordinator.api.offset_commit import offset_commit
from services.coordinator.api.offset_fetch import offset_fetch
from services.coordinator.api.txn_add_offsets import txn_add_offsets
from services.coordinator.api.txn_add_partitions import txn_add_partitions
from services.coordinator.api.txn_describe import txn_describe
from services.coordinator.api.txn_init_producer_id import txn_init_producer_id
from services.coordinator.classic_service import ClassicGroupService
from services.coordinator.config import GroupConfig
from services.coordinator.runtime import PartitionRuntime
from services.coordinator.servicer import GroupCoordinatorServicer
from services.coordinator.servicer import add_to_server as add_group_service
from services.coordinator.shard import GroupShard
from services.coordinator.txn_service import TxnService
from services.coordinator.txn_servicer import TransactionCoordinatorServicer
from services.coordinator.txn_servicer import add_to_server as add_txn_service
from shared import request_context
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.proto import tidelog_pb2 as pb
from shared.proto import transactions_pb2 as tpb
from shared.request_context import RequestContext
from shared.security.acl import CLUSTER_NAME, acl
from shared.security.authorizer import Authorizer

E = ErrorCode
DENIALS = {E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED,
           E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
T_ID = "00000000000000000000000000000001"
U_ID = "00000000000000000000000000000002"
BROKER_1 = "CN=broker-1,OU=tidelog-service"
COORDINATOR_2 = "CN=coordinator-2,OU=tidelog-service"

ACLS = [
    acl("User:alice", "READ", "GROUP", "g"),
    acl("User:alice", "READ", "TOPIC", "t"),
    acl("User:alice", "WRITE", "TRANSACTIONAL_ID", "tx"),
    acl("User:viewer", "DESCRIBE", "GROUP", "g"),
    acl("User:viewer", "DESCRIBE", "TOPIC", "t"),
    acl("User:deleter", "DELETE", "GROUP", "g"),
    acl(f"User:{BROKER_1}", "CLUSTER_ACTION", "CLUSTER", CLUSTER_NAME),
    acl(f"User:{COORDINATOR_2}", "CLUSTER_ACTION", "CLUSTER", CLUSTER_NAME),
]


def security() -> SimpleNamespace:
    return SimpleNamespace(enabled=True, authorizer=Authorizer(ACLS, super_users="User:admin"), tls=None)


def ctx(principal: str, cert_subject: str | None = None, api: str = "test") -> RequestContext:
    return RequestContext(api, "app", principal, "ipv4:10.0.0.9:5555", 0.0, "10.0.0.9", cert_subject)


class OnePartition:
    """Stands in for ``CoordinatorRuntime``: one loaded partition with a real shard; writes complete at once."""

    def __init__(self) -> None:
        shard = GroupShard(0, GroupConfig(), new_member_id=lambda: "member-1")
        shard.set_topics({"t": (T_ID, 4), "u": (U_ID, 4)})
        self.pr = PartitionRuntime(0, shard, owner_revision=1, loaded=True)
        self.partitions = {0: self.pr}
        self.view = SimpleNamespace(partitions_of=lambda topic: 1, owners_of=lambda topic: {0: {"owner": "c1"}},
                                    topics={"t": (T_ID, 4)})
        self.kinds: dict[str, Any] = {}

    def runtime_for(self, group_id: str) -> PartitionRuntime:
        return self.pr

    def txn_runtime_for(self, txn_id: str) -> PartitionRuntime:
        raise AssertionError("a refused transaction request reached the runtime")

    def now_ms(self) -> int:
        return 1_000

    async def write(self, pr: PartitionRuntime, recs: list[Any]) -> None:
        pass

    def submit(self, pr: PartitionRuntime, recs: list[Any]) -> asyncio.Future[int]:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        fut.set_result(0)
        return fut


def api(secure: bool = True) -> CoordinatorApi:
    runtime = OnePartition()
    c = CoordinatorApi(runtime, ClassicGroupService(runtime))  # type: ignore[arg-type]
    c.security = security() if secure else None
    return c


def commit(group: str = "g", topics: tuple[str, ...] = ("t",), offset: int = 10) -> cpb.OffsetCommitRequest:
    return cpb.OffsetCommitRequest(group_id=group, member_epoch=-1, topics=[
        cpb.OffsetCommitTopic(name=t, partitions=[cpb.OffsetCommitPartition(partition=0, committed_offset=offset)])
        for t in topics])


def codes(resp: Any) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition): p.error_code for t in resp.topics for p in t.partitions}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_offset_commit_needs_group_read_and_topic_read() -> None:
    c = api()
    refused = run(offset_commit(c, ctx("mallory"), commit()))
    assert refused.error_code == E.GROUP_AUTHORIZATION_FAILED
    assert codes(refused) == {("t", 0): E.GROUP_AUTHORIZATION_FAILED}
    assert c.runtime.pr.shard.fetch_offsets("g", None) == {}  # the "rewind" of issue 23 is refused
    partial = run(offset_commit(c, ctx("alice"), commit(topics=("t", "u"))))
    assert codes(partial) == {("t", 0): E.NONE, ("u", 0): E.TOPIC_AUTHORIZATION_FAILED}
    assert {tp.topic for tp in c.runtime.pr.shard.fetch_offsets("g", None)} == {"t"}
    assert run(offset_commit(c, ctx("admin"), commit(topics=("u",)))).topics[0].partitions[0].error_code == E.NONE


def test_offset_fetch_needs_group_describe_and_leaves_out_undescribable_topics() -> None:
    c = api()
    run(offset_commit(c, ctx("admin"), commit(topics=("t", "u"))))
    assert run(offset_fetch(c, ctx("mallory"), cpb.OffsetFetchRequest(group_id="g"))).error_code \
        == E.GROUP_AUTHORIZATION_FAILED
    everything = run(offset_fetch(c, ctx("viewer"), cpb.OffsetFetchRequest(group_id="g")))
    assert [(t.name, t.partitions[0].committed_offset) for t in everything.topics] == [("t", 10)]
    asked = run(offset_fetch(c, ctx("viewer"), cpb.OffsetFetchRequest(group_id="g", partitions=[
        cpb.TopicPartitions(topic="t", partitions=[0]), cpb.TopicPartitions(topic="u", partitions=[0])])))
    assert {t.name: t.partitions[0].error_code for t in asked.topics} == {"t": E.NONE,
                                                                          "u": E.TOPIC_AUTHORIZATION_FAILED}


def test_describe_groups_hands_member_ids_only_to_who_may_describe() -> None:
    c = api()
    joined = run(consumer_group_heartbeat(c, ctx("alice"), cpb.ConsumerGroupHeartbeatRequest(
        group_id="g", member_epoch=0, subscribed_topic_names=["t"])))
    assert (joined.error_code, joined.member_id) == (E.NONE, "member-1")
    hidden = run(describe_groups(c, ctx("mallory"), cpb.DescribeGroupsRequest(group_ids=["g"]))).groups[0]
    assert hidden.error_code == E.GROUP_AUTHORIZATION_FAILED and not hidden.members and hidden.group_epoch == 0
    shown = run(describe_groups(c, ctx("viewer"), cpb.DescribeGroupsRequest(group_ids=["g"]))).groups[0]
    assert [(m.member_id, m.member_epoch) for m in shown.members] == [("member-1", joined.member_epoch)]
    # without rights a member's id and epoch do not help either: the commit needs GROUP READ
    forged = cpb.OffsetCommitRequest(group_id="g", member_id="member-1", member_epoch=joined.member_epoch,
                                     topics=commit().topics)
    assert run(offset_commit(c, ctx("mallory"), forged)).error_code == E.GROUP_AUTHORIZATION_FAILED


def test_heartbeat_needs_group_read_and_describe_on_subscribed_topics() -> None:
    c = api()
    request = cpb.ConsumerGroupHeartbeatRequest(group_id="g", member_epoch=0, subscribed_topic_names=["t", "u"])
    assert run(consumer_group_heartbeat(c, ctx("viewer"), request)).error_code == E.GROUP_AUTHORIZATION_FAILED
    assert run(consumer_group_heartbeat(c, ctx("alice"), request)).error_code == E.TOPIC_AUTHORIZATION_FAILED
    assert c.runtime.pr.shard.describe("g") is None  # nobody joined


def test_list_groups_shows_only_describable_groups_and_delete_needs_delete() -> None:
    c = api()
    run(offset_commit(c, ctx("admin"), commit(group="g")))
    run(offset_commit(c, ctx("admin"), commit(group="secret")))
    listed = lambda who: sorted(g.group_id for g in run(list_groups(c, ctx(who), cpb.ListGroupsRequest())).groups)  # noqa: E731
    assert listed("admin") == ["g", "secret"]
    assert listed("viewer") == ["g"]
    assert listed("mallory") == []
    assert run(delete_groups(c, ctx("viewer"), cpb.DeleteGroupsRequest(group_ids=["g"]))).results[0].error_code \
        == E.GROUP_AUTHORIZATION_FAILED
    assert run(delete_groups(c, ctx("deleter"), cpb.DeleteGroupsRequest(group_ids=["g"]))).results[0].error_code \
        == E.NONE


def test_complete_txn_offsets_only_from_a_coordinator_certificate() -> None:
    c = api()
    request = cpb.CompleteTxnOffsetsRequest(group_id="g", producer_id=7, producer_epoch=0, committed=True)
    assert run(complete_txn_offsets(c, ctx("admin"), request)).error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert run(complete_txn_offsets(c, ctx(BROKER_1, BROKER_1), request)).error_code \
        == E.CLUSTER_AUTHORIZATION_FAILED
    assert run(complete_txn_offsets(c, ctx(COORDINATOR_2, COORDINATOR_2), request)).error_code == E.NONE


def txn_service() -> TxnService:
    t = TxnService(None)  # type: ignore[arg-type]
    t.attach(OnePartition())
    t.security = security()
    return t


def test_transactions_need_transactional_id_rights() -> None:
    t = txn_service()
    init = run(txn_init_producer_id(t, ctx("mallory"), tpb.TxnInitProducerIdRequest(transactional_id="tx")))
    assert (init.error_code, init.producer_id) == (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
    offsets = run(txn_add_offsets(t, ctx("alice"), tpb.AddOffsetsToTxnRequest(transactional_id="tx", group_id="other")))
    assert offsets.error_code == E.GROUP_AUTHORIZATION_FAILED
    parts = run(txn_add_partitions(t, ctx("alice"), tpb.AddPartitionsToTxnRequest(
        transactional_id="tx", topics=[tpb.TxnTopic(name="t", partitions=[0])])))
    assert parts.results[0].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED  # alice may READ t, not WRITE
    verify = tpb.AddPartitionsToTxnRequest(transactional_id="tx", verify_only=True,
                                           topics=[tpb.TxnTopic(name="t", partitions=[0])])
    assert run(txn_add_partitions(t, ctx("admin"), verify)).error_code == E.CLUSTER_AUTHORIZATION_FAILED
    described = run(txn_describe(t, ctx("mallory"), tpb.DescribeTransactionsRequest(transactional_ids=["tx"])))
    assert described.transactions[0].error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


# -- every method of both services refuses a principal without rights --------------------------------------

class FakeContext:
    def __init__(self) -> None:
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def peer(self) -> str:
        return "ipv4:10.0.0.9:5555"

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise RuntimeError(details)


class Recorder:
    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.handlers.update(handlers)


async def _messages(*items: Any) -> Any:
    for item in items:
        yield item


#: method -> (request, the error codes its answer carries)
GROUP_CALLS: dict[str, tuple[Any, Any]] = {
    "FindCoordinator": (pb.FindCoordinatorRequest(group_ids=["g"]), lambda r: [c.error_code for c in r.coordinators]),
    "ConsumerGroupHeartbeat": (cpb.ConsumerGroupHeartbeatRequest(group_id="g", member_epoch=0),
                               lambda r: [r.error_code]),
    "OffsetCommit": (commit(), lambda r: [r.error_code]),
    "OffsetCommitStream": (lambda: _messages(cpb.OffsetCommitBatch(commits=[commit()])),
                           lambda rs: [x.error_code for r in rs for x in r.responses]),
    "OffsetFetch": (cpb.OffsetFetchRequest(group_id="g"), lambda r: [r.error_code]),
    "OffsetDelete": (cpb.OffsetDeleteRequest(group_id="g"), lambda r: [r.error_code]),
    "DescribeGroups": (cpb.DescribeGroupsRequest(group_ids=["g"]), lambda r: [g.error_code for g in r.groups]),
    "ListGroups": (cpb.ListGroupsRequest(), lambda r: [E.GROUP_AUTHORIZATION_FAILED] if not r.groups else []),
    "DeleteGroups": (cpb.DeleteGroupsRequest(group_ids=["g"]), lambda r: [x.error_code for x in r.results]),
    "TxnOffsetCommit": (cpb.TxnOffsetCommitRequest(transactional_id="tx", group_id="g"), lambda r: [r.error_code]),
    "CompleteTxnOffsets": (cpb.CompleteTxnOffsetsRequest(group_id="g"), lambda r: [r.error_code]),
    "JoinGroup": (cpb.JoinGroupRequest(group_id="g", protocol_type="consumer"), lambda r: [r.error_code]),
    "SyncGroup": (cpb.SyncGroupRequest(group_id="g"), lambda r: [r.error_code]),
    "Heartbeat": (cpb.HeartbeatRequest(group_id="g"), lambda r: [r.error_code]),
    "LeaveGroup": (cpb.LeaveGroupRequest(group_id="g"), lambda r: [r.error_code]),
}
TXN_CALLS: dict[str, tuple[Any, Any]] = {
    "InitProducerId": (tpb.TxnInitProducerIdRequest(transactional_id="tx"), lambda r: [r.error_code]),
    "AddPartitionsToTxn": (tpb.AddPartitionsToTxnRequest(transactional_id="tx", topics=[
        tpb.TxnTopic(name="t", partitions=[0])]), lambda r: [r.results[0].partitions[0].error_code]),
    "AddOffsetsToTxn": (tpb.AddOffsetsToTxnRequest(transactional_id="tx", group_id="g"), lambda r: [r.error_code]),
    "EndTxn": (tpb.EndTxnRequest(transactional_id="tx"), lambda r: [r.error_code]),
    "DescribeTransactions": (tpb.DescribeTransactionsRequest(transactional_ids=["tx"]),
                             lambda r: [x.error_code for x in r.transactions]),
    "ListTransactions": (tpb.ListTransactionsRequest(), lambda r: [E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]
                         if not r.transactions else []),
}


@pytest.fixture
def as_mallory() -> Any:
    request_context.set_principal_resolver(lambda context: ("mallory", None))
    yield
    request_context.set_principal_resolver(request_context.anonymous)


async def _call(h: grpc.RpcMethodHandler, request: Any) -> Any:
    behavior = h.unary_unary or h.unary_stream or h.stream_unary or h.stream_stream
    out = behavior(request() if callable(request) else request, FakeContext())
    if hasattr(out, "__aiter__"):
        return [x async for x in out]
    return await out


@pytest.mark.usefixtures("as_mallory")
def test_every_group_coordinator_method_refuses_a_principal_without_rights() -> None:
    c = api()
    run(offset_commit(c, ctx("admin"), commit()))  # a group exists, so ListGroups has something to hide
    server = Recorder()
    add_group_service(GroupCoordinatorServicer(c), server)
    assert set(server.handlers) == set(GROUP_CALLS), "a method without an authorization case"
    for method, (request, errors) in GROUP_CALLS.items():
        got = errors(run(_call(server.handlers[method], request)))
        assert got and all(code in DENIALS for code in got), (method, got)


@pytest.mark.usefixtures("as_mallory")
def test_every_transaction_coordinator_method_refuses_a_principal_without_rights() -> None:
    t = txn_service()
    t.runtime.owned = {"transactions": {}}
    server = Recorder()
    add_txn_service(TransactionCoordinatorServicer(t), server)
    assert set(server.handlers) == set(TXN_CALLS), "a method without an authorization case"
    for method, (request, errors) in TXN_CALLS.items():
        got = errors(run(_call(server.handlers[method], request)))
        assert got and all(code in DENIALS for code in got), (method, got)


def test_plaintext_allows_everything() -> None:
    c = api(secure=False)
    assert run(offset_commit(c, ctx("ANONYMOUS"), commit())).topics[0].partitions[0].error_code == E.NONE
    described = run(describe_groups(c, ctx("ANONYMOUS"), cpb.DescribeGroupsRequest(group_ids=["g"]))).groups[0]
    assert described.error_code == E.NONE
