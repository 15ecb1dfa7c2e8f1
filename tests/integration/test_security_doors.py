"""Every door of a secure cluster, enumerated: each gRPC method of each service (from the service descriptors)
and each REST route (from the OpenAPI document) is called with no credential, a wrong one, an unprivileged
principal and a privileged one, and is refused or allowed as its rule says. A method or route added later
without a rule here fails ``test_every_grpc_method_has_a_rule`` / ``test_every_rest_route_has_a_rule``.

Rules:
- OPEN: answered to anyone who reaches the port (gRPC health, the SASL handshake itself);
- CLIENT: a client API; anonymous callers and a user without ACLs ("mallory") are refused, the admin (a super
  user, by SCRAM on the client port) is allowed;
- INTERNAL(role): only a service certificate of that role (mTLS on the internal port) is allowed; the admin by
  SCRAM, the admin's client certificate, and a service certificate of another role are refused.

"Refused" means the call ended PERMISSION_DENIED or UNAUTHENTICATED, or its answer carries an authorization
error code (29, 30, 31, 53) where the API answers with codes, or the resource is not listed where the API
filters what it lists (Metadata, ListGroups, ListTransactions), as Kafka does.

One secure cluster for the module (real etcd with client-certificate authentication, real services)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2

from shared.client import Consumer, Producer
from shared.proto import cleaner_pb2, coordinator_pb2, quota_pb2, security_pb2, tidelog_pb2, transactions_pb2
from shared.security.scram import ScramClient, mechanism
from shared.security.transport import TlsFiles, sync_channel
from tests.conftest import REPO, Cluster, kill_cluster, start_cluster, wait_for

pytestmark = pytest.mark.timeout(240)

OPTIONS = [("grpc.use_local_subchannel_pool", 1)]
AUTH_CODES = {29, 30, 31, 53, 58}
TOPIC, GROUP, TXN = "doors-t", "doors-g", "doors-x"
MALLORY, MALLORY_PASSWORD = "mallory", "mallory-secret-1"


@dataclass(frozen=True)
class Rule:
    kind: str  # "open" | "client" | "internal"
    role: str = ""  # internal: the service role allowed


OPEN, CLIENT = Rule("open"), Rule("client")


def internal(role: str) -> Rule:
    return Rule("internal", role)


#: gRPC service -> the role that serves it.
SERVED_BY = {
    "tidelog.v1.Broker": "broker",
    "tidelog.cleaner.v1.LogCleaner": "broker",
    "tidelog.v1.Controller": "controller",
    "tidelog.v1.GroupCoordinator": "coordinator",
    "tidelog.v1.TransactionCoordinator": "coordinator",
    "tidelog.quota.v1.QuotaService": "quota",
    "tidelog.security.v1.Sasl": "broker",
    "grpc.health.v1.Health": "broker",
}

RULES: dict[str, Rule] = {
    "grpc.health.v1.Health/Check": OPEN,
    "grpc.health.v1.Health/Watch": OPEN,
    "grpc.health.v1.Health/List": OPEN,
    "tidelog.security.v1.Sasl/Authenticate": OPEN,
    "tidelog.v1.Broker/Metadata": CLIENT,
    "tidelog.v1.Broker/Produce": CLIENT,
    "tidelog.v1.Broker/ProduceStream": CLIENT,
    "tidelog.v1.Broker/Fetch": CLIENT,
    "tidelog.v1.Broker/FetchStream": CLIENT,
    "tidelog.v1.Broker/ListOffsets": CLIENT,
    "tidelog.v1.Broker/OffsetsForLeaderEpoch": CLIENT,
    "tidelog.v1.Broker/InitProducerId": CLIENT,
    "tidelog.v1.Broker/FindCoordinator": CLIENT,
    "tidelog.v1.Broker/WriteTxnMarkers": internal("coordinator"),
    "tidelog.v1.Broker/DescribeProducers": CLIENT,
    "tidelog.v1.Broker/DescribeLogDirs": CLIENT,
    "tidelog.v1.Controller/AlterPartition": internal("broker"),
    "tidelog.v1.Controller/ControlledShutdown": internal("broker"),
    "tidelog.v1.Controller/AlterPartitionReassignments": CLIENT,
    "tidelog.v1.Controller/ListPartitionReassignments": CLIENT,
    "tidelog.v1.GroupCoordinator/FindCoordinator": CLIENT,
    "tidelog.v1.GroupCoordinator/ConsumerGroupHeartbeat": CLIENT,
    "tidelog.v1.GroupCoordinator/OffsetCommit": CLIENT,
    "tidelog.v1.GroupCoordinator/OffsetCommitStream": CLIENT,
    "tidelog.v1.GroupCoordinator/OffsetFetch": CLIENT,
    "tidelog.v1.GroupCoordinator/OffsetDelete": CLIENT,
    "tidelog.v1.GroupCoordinator/DescribeGroups": CLIENT,
    "tidelog.v1.GroupCoordinator/ListGroups": CLIENT,
    "tidelog.v1.GroupCoordinator/DeleteGroups": CLIENT,
    "tidelog.v1.GroupCoordinator/TxnOffsetCommit": CLIENT,
    "tidelog.v1.GroupCoordinator/CompleteTxnOffsets": internal("coordinator"),
    "tidelog.v1.GroupCoordinator/JoinGroup": CLIENT,
    "tidelog.v1.GroupCoordinator/SyncGroup": CLIENT,
    "tidelog.v1.GroupCoordinator/Heartbeat": CLIENT,
    "tidelog.v1.GroupCoordinator/LeaveGroup": CLIENT,
    "tidelog.v1.TransactionCoordinator/InitProducerId": CLIENT,
    "tidelog.v1.TransactionCoordinator/AddPartitionsToTxn": CLIENT,
    "tidelog.v1.TransactionCoordinator/AddOffsetsToTxn": CLIENT,
    "tidelog.v1.TransactionCoordinator/EndTxn": CLIENT,
    "tidelog.v1.TransactionCoordinator/DescribeTransactions": CLIENT,
    "tidelog.v1.TransactionCoordinator/ListTransactions": CLIENT,
    "tidelog.cleaner.v1.LogCleaner/AcquireJob": internal("cleaner"),
    "tidelog.cleaner.v1.LogCleaner/ReadSegments": internal("cleaner"),
    "tidelog.cleaner.v1.LogCleaner/RenewLease": internal("cleaner"),
    "tidelog.cleaner.v1.LogCleaner/CompleteJob": internal("cleaner"),
    "tidelog.cleaner.v1.LogCleaner/FailJob": internal("cleaner"),
    "tidelog.cleaner.v1.LogCleaner/CleanerStatus": CLIENT,
    "tidelog.quota.v1.QuotaService/ReportUsage": internal("broker"),
    "tidelog.quota.v1.QuotaService/DescribeUsage": CLIENT,
}

T, C, X, Q, CL, S = tidelog_pb2, coordinator_pb2, transactions_pb2, quota_pb2, cleaner_pb2, security_pb2


def requests() -> dict[str, Message]:
    """One request per method, naming the module's topic, group and transactional id."""
    produce = T.ProduceRequest(acks=-1, timeout_ms=5000, client_id="doors", topics=[
        T.ProduceTopicData(name=TOPIC, partitions=[T.ProducePartitionData(partition=0, records=b"")])])
    fetch = T.FetchRequest(replica_id=-1, max_wait_ms=0, max_bytes=1 << 16, client_id="doors",
                           topics=[T.FetchTopic(name=TOPIC, partitions=[T.FetchPartition(partition=0, partition_max_bytes=1 << 16)])])
    tp = C.TopicPartitions(topic=TOPIC, partitions=[0])
    commit = C.OffsetCommitRequest(group_id=GROUP, member_id="", member_epoch=-1,
                                   topics=[C.OffsetCommitTopic(name=TOPIC)])
    return {
        "grpc.health.v1.Health/Check": health_pb2.HealthCheckRequest(),
        "grpc.health.v1.Health/Watch": health_pb2.HealthCheckRequest(),
        "grpc.health.v1.Health/List": health_pb2.HealthListRequest(),
        "tidelog.security.v1.Sasl/Authenticate": S.SaslAuthenticateRequest(mechanism="SCRAM-SHA-512"),
        "tidelog.v1.Broker/Metadata": T.MetadataRequest(),
        "tidelog.v1.Broker/Produce": produce,
        "tidelog.v1.Broker/ProduceStream": produce,
        "tidelog.v1.Broker/Fetch": fetch,
        "tidelog.v1.Broker/FetchStream": fetch,
        "tidelog.v1.Broker/ListOffsets": T.ListOffsetsRequest(replica_id=-1, topics=[T.ListOffsetsTopic(name=TOPIC, partitions=[T.ListOffsetsPartition(partition=0, timestamp=-1)])]),
        "tidelog.v1.Broker/OffsetsForLeaderEpoch": T.OffsetsForLeaderEpochRequest(
            replica_id=-1, topics=[T.EpochTopic(name=TOPIC, partitions=[T.EpochPartition(partition=0, leader_epoch=0)])]),
        "tidelog.v1.Broker/InitProducerId": T.InitProducerIdRequest(),
        "tidelog.v1.Broker/FindCoordinator": T.FindCoordinatorRequest(group_ids=[GROUP]),
        "tidelog.v1.Broker/WriteTxnMarkers": T.WriteTxnMarkersRequest(),
        "tidelog.v1.Broker/DescribeProducers": T.DescribeProducersRequest(
            topics=[T.DescribeProducersTopic(name=TOPIC, partitions=[0])]),
        "tidelog.v1.Broker/DescribeLogDirs": T.DescribeLogDirsRequest(),
        "tidelog.v1.Controller/AlterPartition": T.AlterPartitionRequest(broker_id=1, topic=TOPIC),
        "tidelog.v1.Controller/ControlledShutdown": T.ControlledShutdownRequest(broker_id=1),
        "tidelog.v1.Controller/AlterPartitionReassignments": T.AlterPartitionReassignmentsRequest(),
        "tidelog.v1.Controller/ListPartitionReassignments": T.ListPartitionReassignmentsRequest(topics=[TOPIC]),
        "tidelog.v1.GroupCoordinator/FindCoordinator": T.FindCoordinatorRequest(group_ids=[GROUP]),
        "tidelog.v1.GroupCoordinator/ConsumerGroupHeartbeat": C.ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_epoch=0, rebalance_timeout_ms=5000, subscribed_topic_names=[TOPIC]),
        "tidelog.v1.GroupCoordinator/OffsetCommit": commit,
        "tidelog.v1.GroupCoordinator/OffsetCommitStream": C.OffsetCommitBatch(commits=[commit]),
        "tidelog.v1.GroupCoordinator/OffsetFetch": C.OffsetFetchRequest(group_id=GROUP, partitions=[tp]),
        "tidelog.v1.GroupCoordinator/OffsetDelete": C.OffsetDeleteRequest(group_id=GROUP, partitions=[tp]),
        "tidelog.v1.GroupCoordinator/DescribeGroups": C.DescribeGroupsRequest(group_ids=[GROUP]),
        "tidelog.v1.GroupCoordinator/ListGroups": C.ListGroupsRequest(),
        "tidelog.v1.GroupCoordinator/DeleteGroups": C.DeleteGroupsRequest(group_ids=[GROUP + "-gone"]),
        "tidelog.v1.GroupCoordinator/TxnOffsetCommit": C.TxnOffsetCommitRequest(
            transactional_id=TXN, group_id=GROUP, producer_id=1, producer_epoch=0),
        "tidelog.v1.GroupCoordinator/CompleteTxnOffsets": C.CompleteTxnOffsetsRequest(
            transactional_id=TXN, group_id=GROUP),
        "tidelog.v1.GroupCoordinator/JoinGroup": C.JoinGroupRequest(
            group_id=GROUP + "-classic", session_timeout_ms=10000, rebalance_timeout_ms=10000,
            protocol_type="consumer", protocols=[C.JoinGroupProtocol(name="range")]),
        "tidelog.v1.GroupCoordinator/SyncGroup": C.SyncGroupRequest(group_id=GROUP + "-classic", member_id="m"),
        "tidelog.v1.GroupCoordinator/Heartbeat": C.HeartbeatRequest(group_id=GROUP + "-classic", member_id="m"),
        "tidelog.v1.GroupCoordinator/LeaveGroup": C.LeaveGroupRequest(group_id=GROUP + "-classic"),
        "tidelog.v1.TransactionCoordinator/InitProducerId": X.TxnInitProducerIdRequest(
            transactional_id=TXN, transaction_timeout_ms=10000, producer_id=-1, producer_epoch=-1),
        "tidelog.v1.TransactionCoordinator/AddPartitionsToTxn": X.AddPartitionsToTxnRequest(
            transactional_id=TXN, producer_id=1, producer_epoch=0),
        "tidelog.v1.TransactionCoordinator/AddOffsetsToTxn": X.AddOffsetsToTxnRequest(
            transactional_id=TXN, producer_id=1, producer_epoch=0, group_id=GROUP),
        "tidelog.v1.TransactionCoordinator/EndTxn": X.EndTxnRequest(
            transactional_id=TXN, producer_id=1, producer_epoch=0, committed=False),
        "tidelog.v1.TransactionCoordinator/DescribeTransactions": X.DescribeTransactionsRequest(
            transactional_ids=[TXN]),
        "tidelog.v1.TransactionCoordinator/ListTransactions": X.ListTransactionsRequest(),
        "tidelog.cleaner.v1.LogCleaner/AcquireJob": CL.AcquireJobRequest(worker_id="doors"),
        "tidelog.cleaner.v1.LogCleaner/ReadSegments": CL.ReadSegmentsRequest(job_id="none", worker_id="doors"),
        "tidelog.cleaner.v1.LogCleaner/RenewLease": CL.RenewLeaseRequest(job_id="none", worker_id="doors"),
        "tidelog.cleaner.v1.LogCleaner/CompleteJob": CL.CleanedChunk(job_id="none", worker_id="doors"),
        "tidelog.cleaner.v1.LogCleaner/FailJob": CL.FailJobRequest(job_id="none", worker_id="doors"),
        "tidelog.cleaner.v1.LogCleaner/CleanerStatus": CL.CleanerStatusRequest(),
        "tidelog.quota.v1.QuotaService/ReportUsage": Q.UsageReport(broker_id=1),
        "tidelog.quota.v1.QuotaService/DescribeUsage": Q.DescribeUsageRequest(),
    }


def all_methods() -> dict[str, tuple[Any, Any]]:
    """Every gRPC method Tidelog serves: path -> (method descriptor, its output class)."""
    from google.protobuf import message_factory

    out: dict[str, tuple[Any, Any]] = {}
    for mod in (T, C, X, CL, Q, S, health_pb2):
        for service in mod.DESCRIPTOR.services_by_name.values():
            for m in service.methods:
                out[f"{service.full_name}/{m.name}"] = (m, message_factory.GetMessageClass(m.output_type))
    return out


# -- callers ----------------------------------------------------------------------------------------------


@dataclass
class Caller:
    name: str
    tls: TlsFiles
    internal: bool  # the internal (mTLS) port, else the client port
    user: str = ""
    password: str = ""


def scram_token(address: str, ca: str, user: str, password: str) -> str:
    client = ScramClient(mechanism("SCRAM-SHA-512"), user, password)
    with sync_channel(address, OPTIONS, tls=TlsFiles(ca)) as ch:
        call = ch.unary_unary("/tidelog.security.v1.Sasl/Authenticate",
                              request_serializer=S.SaslAuthenticateRequest.SerializeToString,
                              response_deserializer=S.SaslAuthenticateResponse.FromString)
        first = call(S.SaslAuthenticateRequest(mechanism="SCRAM-SHA-512", auth_bytes=client.first()), timeout=10)
        if first.error_code:
            return ""
        final = call(S.SaslAuthenticateRequest(mechanism="SCRAM-SHA-512", auth_bytes=client.final(first.auth_bytes),
                                               handshake_id=first.handshake_id), timeout=10)
        return final.session_token if not final.error_code else ""


def _auth_codes(msg: Message) -> set[int]:
    """Every authorization error code anywhere in a response."""
    codes: set[int] = set()
    for field, value in msg.ListFields():
        if field.message_type is not None:
            for item in (value if field.is_repeated else [value]):
                codes |= _auth_codes(item)
        elif field.name in ("error_code", "error") and isinstance(value, int) and value in AUTH_CODES:
            codes.add(value)
    return codes


def _lists_resource(path: str, resp: Message) -> bool:
    if path.endswith("Broker/Metadata"):
        return any(t.name == TOPIC for t in resp.topics)  # type: ignore[attr-defined]
    if path.endswith("/ListGroups"):
        return any(g.group_id == GROUP for g in resp.groups)  # type: ignore[attr-defined]
    if path.endswith("/ListTransactions"):
        return any(t.transactional_id == TXN for t in resp.transactions)  # type: ignore[attr-defined]
    return True


def call(address: str, tls: TlsFiles, token: str, path: str, request: Message, method: Any, out: Any) -> str:
    """``"denied"`` (PERMISSION_DENIED / UNAUTHENTICATED), ``"code"`` (an authorization error code in the
    answer), ``"hidden"`` (the resource left out of a listing), ``"allowed"`` or ``"unreachable"`` (the TLS
    handshake itself failed)."""
    metadata = [("authorization", f"Bearer {token}")] if token else None
    with sync_channel(address, OPTIONS, tls=tls) as ch:
        args = {"request_serializer": type(request).SerializeToString, "response_deserializer": out.FromString}
        try:
            if method.client_streaming:
                responses = ch.stream_stream("/" + path, **args)(iter([request]), metadata=metadata, timeout=10)
                resp = next(iter(responses))
            elif method.server_streaming:
                resp = next(iter(ch.unary_stream("/" + path, **args)(request, metadata=metadata, timeout=10)), None)
            else:
                resp = ch.unary_unary("/" + path, **args)(request, metadata=metadata, timeout=10)
        except StopIteration:
            return "allowed"
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
                return "denied"
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                return "unreachable"
            return "allowed"  # got past authorization: any other error is the API's own answer
    if resp is None:
        return "allowed"
    if _auth_codes(resp):
        return "code"
    return "allowed" if _lists_resource(path, resp) else "hidden"


# -- the cluster -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(str(tmp_path_factory.mktemp("doors")), secure=True, controllers=1, brokers=3,
                      coordinators=1, cleaners=1, quotas=1,
                      extra_env={"TIDELOG_OFFSETS_TOPIC_NUM_PARTITIONS": "1",
                                 "TIDELOG_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
                                 "TIDELOG_TRANSACTION_STATE_LOG_NUM_PARTITIONS": "1",
                                 "TIDELOG_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
                                 "TIDELOG_TRANSACTION_STATE_LOG_MIN_ISR": "1"})
    try:
        s = c.info["security"]
        admin = (s["admin_user"], open(s["admin_password_file"]).read().strip())
        with httpx.Client(base_url=c.rest, verify=s["ca"], auth=admin, timeout=10) as http:
            r = http.post("/v1/topics", json={"name": TOPIC, "partitions": 1, "replication_factor": 1})
            assert r.status_code in (200, 201), r.text
            r = http.post("/v1/users", json={"name": MALLORY, "password": MALLORY_PASSWORD})
            assert r.status_code in (200, 201), r.text
        for role in ("broker", "controller", "coordinator", "quota"):  # the new user reached every cache (watch)
            address = c.procs(role)[0].info["client_address"]
            wait_for(lambda a=address: scram_token(a, s["ca"], MALLORY, MALLORY_PASSWORD), 10,
                     what=f"mallory's credential at the {role}")
        # the transactional id and the group exist (ListTransactions / ListGroups list them to the admin)
        creds = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": admin[0],
                 "sasl_plain_password": admin[1], "ssl_cafile": s["ca"]}
        bootstrap = c.procs("broker")[0].info["client_address"]
        with Producer(bootstrap, transactional_id=TXN, **creds) as p:
            p.init_transactions()
            p.begin_transaction()
            p.send(TOPIC, b"v")
            p.commit_transaction()
        with Consumer(bootstrap, group_id=GROUP, auto_offset_reset="earliest", **creds) as consumer:
            consumer.subscribe([TOPIC])
            wait_for(lambda: consumer.poll(timeout_ms=200) or consumer.assignment(), 30, what="a group assignment")
            consumer.commit()
        yield c
    finally:
        kill_cluster(c)


def pki(c: Cluster, name: str) -> TlsFiles:
    ca = c.info["security"]["ca"]
    d = os.path.dirname(ca)
    return TlsFiles(ca, os.path.join(d, f"{name}.crt"), os.path.join(d, f"{name}.key"))


def endpoint(c: Cluster, role: str, internal_port: bool) -> str:
    p = c.procs(role)[0]
    return p.address if internal_port else p.info["client_address"]


def outcome(c: Cluster, path: str, tls: TlsFiles, internal_port: bool, token: str) -> str:
    """``"refused"``, ``"allowed"``, or for an open method what ``call`` said."""
    method, out = all_methods()[path]
    address = endpoint(c, SERVED_BY[path.rpartition("/")[0]], internal_port)
    said = call(address, tls, token, path, requests()[path], method, out)
    if RULES[path].kind == "open":
        return said
    return "refused" if said in ("denied", "code", "hidden") else said


_TOKENS: dict[str, tuple[str, str]] = {}


def tokens(c: Cluster, client_port: str) -> tuple[str, str]:
    """The admin's and mallory's session tokens on one client port (one SCRAM exchange each per module)."""
    if client_port not in _TOKENS:
        s = c.info["security"]
        admin_password = open(s["admin_password_file"]).read().strip()
        admin_token = scram_token(client_port, s["ca"], s["admin_user"], admin_password)
        mallory_token = scram_token(client_port, s["ca"], MALLORY, MALLORY_PASSWORD)
        assert admin_token and mallory_token
        assert scram_token(client_port, s["ca"], MALLORY, "wrong") == ""  # a wrong password gets no session
        _TOKENS[client_port] = admin_token, mallory_token
    return _TOKENS[client_port]


def test_every_grpc_method_has_a_rule() -> None:
    assert set(all_methods()) == set(RULES), "a gRPC method without a rule (or a rule without a method)"
    assert set(requests()) == set(RULES)
    assert {p.rpartition("/")[0] for p in RULES} == set(SERVED_BY)


@pytest.mark.parametrize("path", sorted(RULES))
def test_grpc_method_obeys_its_rule(secure: Cluster, path: str) -> None:
    rule = RULES[path]
    s = secure.info["security"]
    ca_only = TlsFiles(s["ca"])
    role = SERVED_BY[path.rpartition("/")[0]]
    client_port = endpoint(secure, role, internal_port=False)
    admin_token, mallory_token = tokens(secure, client_port)

    anonymous = outcome(secure, path, ca_only, False, "")
    forged = outcome(secure, path, ca_only, False, "not-a-session-token")
    mallory = outcome(secure, path, ca_only, False, mallory_token)
    admin_scram = outcome(secure, path, ca_only, False, admin_token)
    if rule.kind == "open":  # reached and answered (the SASL handshake answers garbage with its own 58)
        assert anonymous in ("allowed", "code"), f"{path}: {anonymous}"
        return
    assert anonymous == "refused", f"{path}: anonymous {anonymous}"
    assert forged == "refused", f"{path}: a forged token {forged}"
    assert mallory == "refused", f"{path}: a user without ACLs {mallory}"
    if rule.kind == "client":
        assert admin_scram == "allowed", f"{path}: the admin {admin_scram}"
        return
    assert admin_scram == "refused", f"{path}: internal RPC open to the admin's password ({admin_scram})"
    admin_cert = outcome(secure, path, pki(secure, "admin"), True, "")
    assert admin_cert == "refused", f"{path}: internal RPC open to a client certificate ({admin_cert})"
    other_role = "quota" if rule.role != "quota" else "cleaner"
    wrong_role = outcome(secure, path, pki(secure, f"{other_role}-1"), True, "")
    assert wrong_role == "refused", f"{path}: internal RPC open to a {other_role} certificate ({wrong_role})"
    right_role = outcome(secure, path, pki(secure, f"{rule.role}-1"), True, "")
    assert right_role == "allowed", f"{path}: refused to a {rule.role} certificate"


# -- REST --------------------------------------------------------------------------------------------------

#: Routes anyone may call: the API's own documentation.
REST_OPEN = {("GET", "/docs"), ("GET", "/openapi.json"), ("GET", "/redoc"), ("GET", "/docs/oauth2-redirect")}


def rest_routes(c: Cluster) -> list[tuple[str, str]]:
    s = c.info["security"]
    doc = httpx.get(c.rest + "/openapi.json", verify=s["ca"], timeout=10).json()
    return sorted((m.upper(), p) for p, ops in doc["paths"].items() for m in ops)


#: The names REST routes are called with: nothing the module's other tests use (the admin's calls succeed,
#: and a DELETE /v1/topics/{name} must not take the module's topic away).
REST_NAME = "doors-rest"


def _fill(path: str) -> str:
    return (path.replace("{name}", REST_NAME).replace("{topic}", REST_NAME).replace("{group}", REST_NAME)
            .replace("{group_id}", REST_NAME).replace("{partition}", "0").replace("{broker_id}", "1")
            .replace("{transactional_id}", REST_NAME).replace("{id}", "1"))


def test_every_rest_route_is_refused_without_a_credential_and_to_a_user_without_acls(secure: Cluster) -> None:
    s = secure.info["security"]
    routes = rest_routes(secure)
    assert len(routes) > 20
    admin = (s["admin_user"], open(s["admin_password_file"]).read().strip())
    problems: list[str] = []
    with httpx.Client(base_url=secure.rest, verify=s["ca"], timeout=10) as http:
        for method, path in routes:
            if (method, path) in REST_OPEN:
                continue
            url = _fill(path)
            body = {} if method in ("POST", "PUT", "PATCH") else None
            for who, auth, expected in (("nobody", None, {401}), ("wrong password", (admin[0], "x"), {401}),
                                        ("mallory", (MALLORY, MALLORY_PASSWORD), {403})):
                r = http.request(method, url, json=body, auth=auth)
                if r.status_code not in expected:
                    problems.append(f"{method} {path} as {who}: {r.status_code} {r.text[:120]}")
            r = http.request(method, url, json=body, auth=admin)
            if r.status_code in (401, 403):
                problems.append(f"{method} {path} as admin: {r.status_code} {r.text[:120]}")
    assert not problems, "\n".join(problems)


def test_refusals_and_admin_changes_are_audited_on_every_door(secure: Cluster) -> None:
    """The REST refusals below, the gRPC refusals of the enumeration above (mallory, a wrong password) and the
    fixture's admin changes are JSON lines in the services' audit logs."""
    s = secure.info["security"]
    with httpx.Client(base_url=secure.rest, verify=s["ca"], timeout=10) as http:
        assert http.delete(f"/v1/topics/{TOPIC}").status_code == 401
        assert http.delete(f"/v1/topics/{TOPIC}", auth=(MALLORY, MALLORY_PASSWORD)).status_code == 403
    scram_token(endpoint(secure, "broker", internal_port=False), s["ca"], MALLORY, "wrong")  # a failed gRPC sign-in
    data_dir = secure.lc.spec.data_dir

    def events() -> set[tuple[str, str, str]]:
        seen = set()
        for root, _dirs, files in os.walk(data_dir):
            for f in files:
                if f == "audit.log":
                    for line in open(os.path.join(root, f)):
                        e = json.loads(line)
                        seen.add((e["kind"], e["door"], e["principal"]))
        return seen

    wanted = {("authentication_failure", "rest", "User:admin"),  # the enumeration's wrong password
              ("authorization_denied", "rest", f"User:{MALLORY}"),
              ("authentication_failure", "grpc", f"User:{MALLORY}"),
              ("authorization_denied", "grpc", f"User:{MALLORY}"),
              ("admin_change", "rest", "User:admin")}  # the fixture's topic and user
    wait_for(lambda: wanted <= events(), 10, what=f"audit lines {wanted}")



# -- the attacks of the issue, one by one (each succeeded against an unsecured cluster) --------------------


def _as(c: Cluster, who: str) -> tuple[TlsFiles, bool, str]:
    """(TLS files, internal port?, session token) of a caller: "anonymous", "mallory", "admin", or a
    certificate name from the cluster's PKI (``broker-1``, ``cleaner-1``, ``admin``) on the internal port."""
    s = c.info["security"]
    if who in ("anonymous", "mallory", "admin-scram"):
        if who == "anonymous":
            return TlsFiles(s["ca"]), False, ""
        admin_token, mallory_token = tokens(c, endpoint(c, "broker", internal_port=False))
        return TlsFiles(s["ca"]), False, mallory_token if who == "mallory" else admin_token
    return pki(c, who), True, ""


def _call(c: Cluster, who: str, path: str, request: Message, role: str = "broker") -> str:
    method, out = all_methods()[path]
    tls, internal_port, token = _as(c, who)
    address = endpoint(c, role, internal_port)
    if not internal_port and role != "broker":
        token = tokens(c, address)[0 if who == "admin-scram" else 1] if token else ""
    return call(address, tls, token, path, request, method, out)


def test_attack_forged_replica_fetch_is_refused(secure: Cluster) -> None:
    """A fetch claiming to be follower 1 (CVE-2018-1288's class): it would move the high watermark, read past
    it and skip the consumer quota. Only broker 1's own certificate may fetch as replica 1."""
    forged = T.FetchRequest(replica_id=1, max_wait_ms=0, max_bytes=1 << 16, topics=[
        T.FetchTopic(name=TOPIC, partitions=[T.FetchPartition(partition=0, fetch_offset=1 << 20)])])
    for who in ("anonymous", "mallory", "admin-scram", "admin", "cleaner-1", "coordinator-1"):
        assert _call(secure, who, "tidelog.v1.Broker/Fetch", forged) in ("denied", "code"), who


def test_attack_cluster_view_hides_incarnations(secure: Cluster) -> None:
    """/v1/cluster published every broker's incarnation, which ControlledShutdown obeyed."""
    s = secure.info["security"]
    with httpx.Client(base_url=secure.rest, verify=s["ca"], timeout=10) as http:
        assert http.get("/v1/cluster").status_code == 401
        seen = http.get("/v1/cluster", auth=(MALLORY, MALLORY_PASSWORD))
        assert seen.status_code == 403 or "incarnation" not in seen.text, seen.text
    shutdown = T.ControlledShutdownRequest(broker_id=1, incarnation="anything")
    for who in ("mallory", "admin-scram", "admin", "cleaner-1"):
        assert _call(secure, who, "tidelog.v1.Controller/ControlledShutdown", shutdown, "controller") in (
            "denied", "code"), who


def test_attack_cleaner_job_lease_by_a_client_is_refused(secure: Cluster) -> None:
    """AcquireJob + ReadSegments as "mallory" returned a whole log (and the hash seed); unfinished leases
    quarantined the log."""
    for who in ("anonymous", "mallory", "admin-scram", "admin", "broker-1", "quota-1"):
        assert _call(secure, who, "tidelog.cleaner.v1.LogCleaner/AcquireJob",
                     CL.AcquireJobRequest(worker_id="mallory")) == "denied", who
        assert _call(secure, who, "tidelog.cleaner.v1.LogCleaner/ReadSegments",
                     CL.ReadSegmentsRequest(job_id="j", worker_id="mallory")) == "denied", who


def test_attack_forged_usage_reports_are_refused(secure: Cluster) -> None:
    """ReportUsage streams claiming to be brokers throttled a victim for hours."""
    report = Q.UsageReport(broker_id=2)
    for who in ("anonymous", "mallory", "admin-scram", "admin", "cleaner-1", "broker-1"):  # broker 1 is not 2
        assert _call(secure, who, "tidelog.quota.v1.QuotaService/ReportUsage", report, "quota") == "denied", who


def test_attack_rewinding_another_group_is_refused(secure: Cluster) -> None:
    """OffsetCommit with member "" / epoch -1 rewound a group; DescribeGroups handed out member ids."""
    rewind = C.OffsetCommitRequest(group_id=GROUP, member_id="", member_epoch=-1, topics=[
        C.OffsetCommitTopic(name=TOPIC, partitions=[C.OffsetCommitPartition(partition=0, committed_offset=0)])])
    assert _call(secure, "mallory", "tidelog.v1.GroupCoordinator/OffsetCommit", rewind, "coordinator") in (
        "denied", "code")
    described = _call(secure, "mallory", "tidelog.v1.GroupCoordinator/DescribeGroups",
                      C.DescribeGroupsRequest(group_ids=[GROUP]), "coordinator")
    assert described in ("denied", "code")


def test_attack_anonymous_topic_delete_and_default_quota_are_refused(secure: Cluster) -> None:
    s = secure.info["security"]
    with httpx.Client(base_url=secure.rest, verify=s["ca"], timeout=10) as http:
        assert http.delete(f"/v1/topics/{TOPIC}").status_code == 401
        quota = {"entries": [{"entity": {"client-id": None}, "ops": [{"key": "producer_byte_rate", "value": 1024}]}]}
        assert http.post("/v1/quotas/alter", json=quota).status_code == 401
        assert http.post("/v1/quotas/alter", json=quota, auth=(MALLORY, MALLORY_PASSWORD)).status_code == 403
        assert http.get(f"/v1/topics/{TOPIC}", auth=(s["admin_user"], open(s["admin_password_file"]).read().strip())
                        ).status_code == 200  # still there


# -- the README's secured walkthrough, as a newcomer runs it -----------------------------------------------


def _readme_security_blocks() -> tuple[str, str]:
    with open(os.path.join(REPO, "README.md")) as f:
        section = f.read().split("## Security: TLS, users and ACLs", 1)[1].split("\n## ", 1)[0]
    [bash] = re.findall(r"```bash\n(.*?)```", section, re.S)
    [python] = re.findall(r"```python\n(.*?)```", section, re.S)
    return bash, python


def test_the_readme_security_walkthrough_runs(secure: Cluster) -> None:
    """The section's shell commands (but `export` and `tidelog up`, which the fixture stands for) and its
    Python snippet, against this secure cluster."""
    bash, python = _readme_security_blocks()
    lines = [ln for ln in bash.splitlines() if not ln.startswith(("export TIDELOG_DATA_DIR", "tidelog up"))]
    env = {**os.environ, "TIDELOG_DATA_DIR": secure.info["data_dir"]}
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(lines)], capture_output=True, text=True,
                       timeout=180, cwd=REPO, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "u1\thello" in out and "u2\tworld" in out  # the admin's CLI produced and consumed
    assert "Created user 'alice'" in out and "principal=User:alice" in out
    assert '"error":"SASL_AUTHENTICATION_FAILED"' in out  # curl without a credential
    assert "User:bob is not authorized to DELETE TOPIC 'clicks'" in out
    assert '"resource_name":"clicks"' in out  # the admin reads alice's ACLs
    r = subprocess.run([sys.executable, "-c", python], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert re.search(r"alice wrote to partition \d+ at offset \d+", r.stdout), r.stdout
    assert "alice read [(b'u3', b'as alice')]" in r.stdout
    assert "alice with 'wrong': SASL_AUTHENTICATION_FAILED" in r.stdout
    assert "bob with 'bob-secret': TOPIC_AUTHORIZATION_FAILED" in r.stdout
