"""The REST API on a secure controller (issue 23): HTTP Basic with SCRAM users' passwords, a real
``Authorizer`` with ACLs behind every route. Every route of the OpenAPI document has a rule and declares
401 and 403; called with no credential, a wrong password, an unprivileged user and a privileged one, each
is refused (401 / 403 with Kafka's name) or reaches its API as its rule says. Successful verifications are
remembered (one PBKDF2 per credential, not per request) and forgotten when the password changes; failures
are slowed per host. ``/v1/cluster`` shows broker incarnations only to who may DESCRIBE the cluster.
And the controller's gRPC methods: AlterPartition and ControlledShutdown only from the named broker's own
certificate, the reassignment RPCs with CLUSTER rights."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from services.controller.api import ControllerApi
from services.controller.api import delete_topic as delete_topic_api
from services.controller.grpc_api import ControllerServicer
from services.controller.grpc_api import add_to_server as add_controller_service
from services.controller.rest.app import create_app
from services.controller.rest.auth import BasicAuthenticator
from services.controller.rest.rules import rule_for
from shared import request_context
from shared.errors import ErrorCode
from shared.metadata.keys import Keys
from shared.proto import tidelog_pb2 as pb
from shared.security import audit
from shared.security.acl import acl
from shared.security.auth_failures import AuthFailureTracker
from shared.security.authorizer import Authorizer
from shared.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential, ScramMechanism, create_credential
from tests.unit.controller.test_controller_api import ROUTES, Calls, _refuse
from tests.unit.handler_recorder import HandlerRecorder

PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw", "nobody": "nobody-pw"}
BROKERS = {1: {"id": 1, "address": "10.0.0.1:9000", "client_address": "10.0.0.1:9100", "incarnation": "1700-a"}}


class Credentials:
    """Stands in for ``SecurityStore.credential``: SCRAM credentials in memory (alice uses SHA-256)."""

    def __init__(self) -> None:
        self.creds: dict[tuple[str, str], ScramCredential] = {}
        for user, password in PASSWORDS.items():
            self.set(user, password, SCRAM_SHA_256 if user == "alice" else SCRAM_SHA_512)

    def set(self, user: str, password: str, mech: ScramMechanism) -> None:
        self.creds[(user, mech.name)] = create_credential(password, mech)

    def credential(self, user: str, mech: ScramMechanism | str) -> ScramCredential | None:
        return self.creds.get((user, mech if isinstance(mech, str) else mech.name))


class Store:
    """What ``describe_cluster`` reads: the cluster id, the controller, brokers and services."""

    keys = Keys("test")

    async def get(self, key: bytes) -> Any:
        return ("cid", 1, 1) if key == self.keys.cluster_id() else None

    async def get_prefix(self, prefix: bytes) -> dict[bytes, Any]:
        if prefix == self.keys.brokers_prefix():
            return {b"b1": (BROKERS[1], 1, 1)}
        return {}


def basic(user: str, password: str | None = None) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password or PASSWORDS[user]}".encode()).decode()
    return {"authorization": f"Basic {token}"}


def secure_app(acls: list[Any] | None = None, tracker: AuthFailureTracker | None = None) -> tuple[TestClient, Any]:
    c = ControllerApi(Store())  # type: ignore[arg-type]
    c.election = SimpleNamespace(active=True)  # type: ignore[assignment]
    store = Credentials()
    c.security = SimpleNamespace(enabled=True, tls=None, store=store, authorizer=Authorizer(
        acls or [], super_users="User:admin", allow_everyone_if_no_acl_found=False))
    app = create_app(c)
    app.state.basic_auth = BasicAuthenticator(
        tracker=tracker if tracker is not None else AuthFailureTracker(free_failures=10**6))
    return TestClient(app), app


def _denial(method: str, route: str) -> str:
    rule = rule_for(method, route)
    assert rule is not None
    rtype = rule.listed[0] if rule.listed else rule.needs[0].rtype
    return {2: "TOPIC_AUTHORIZATION_FAILED", 3: "GROUP_AUTHORIZATION_FAILED", 4: "CLUSTER_AUTHORIZATION_FAILED",
            5: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"}[rtype]


def test_every_route_has_a_rule_and_declares_401_and_403() -> None:
    paths = create_app(controller=None).openapi()["paths"]
    for path, ops in paths.items():
        for method, op in ops.items():
            assert rule_for(method.upper(), path) is not None, f"{method.upper()} {path} has no authorization rule"
            assert {"401", "403"} <= set(op["responses"]), f"{method.upper()} {path}"


def test_every_route_refuses_or_allows_as_its_rule_says(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls(monkeypatch, _refuse)
    client, _ = secure_app()
    for method, route, url, body, api in ROUTES:
        for headers in ({}, basic("admin", "wrong"), basic("ghost", "whatever")):
            r = client.request(method, url, json=body, headers=headers)
            assert r.status_code == 401, (url, headers, r.text)
            assert r.headers["www-authenticate"].startswith("Basic") and r.json()["error"] == "SASL_AUTHENTICATION_FAILED"
        calls.seen.clear()
        for unprivileged_body in ((body, {}) if body is not None else (None,)):  # {}: no name to judge by
            r = client.request(method, url, json=unprivileged_body, headers=basic("nobody"))
            assert (r.status_code, r.json()["error"]) == (403, _denial(method, route)), url
        assert calls.seen == [], url
        r = client.request(method, url, json=body, headers=basic("admin"))
        assert (r.status_code, r.json()) == (400, {"error": "INVALID_REQUEST", "message": f"{api} recorded"}), url
        assert calls.seen[-1][1].principal == "admin"


def test_acls_grant_exactly_their_operations(monkeypatch: pytest.MonkeyPatch) -> None:
    Calls(monkeypatch, _refuse)
    client, _ = secure_app([acl("User:alice", "CREATE", "TOPIC", "t1"), acl("User:alice", "ALTER", "CLUSTER",
                                                                              "kafka-cluster")])
    assert client.post("/v1/topics", json={"name": "t1", "partitions": 1}, headers=basic("alice")).status_code == 400
    assert client.post("/v1/topics", json={}, headers=basic("alice")).status_code == 400  # may create some topic
    denied = client.post("/v1/topics", json={"name": "t2", "partitions": 1}, headers=basic("alice"))
    assert (denied.status_code, denied.json()["error"]) == (403, "TOPIC_AUTHORIZATION_FAILED")
    deleted = client.delete("/v1/topics/t1", headers=basic("alice"))
    assert (deleted.status_code, deleted.json()["error"]) == (403, "TOPIC_AUTHORIZATION_FAILED")
    assert client.post("/v1/elect-leaders", json={"all_topic_partitions": True},
                       headers=basic("alice")).status_code == 400  # CLUSTER ALTER: let through to the API


def test_a_verified_password_is_remembered_until_it_changes() -> None:
    client, app = secure_app()
    auth: BasicAuthenticator = app.state.basic_auth
    for _ in range(3):
        assert client.get("/v1/cluster", headers=basic("admin")).status_code == 200
    assert auth.verifications == 1
    creds: Credentials = app.state.controller.security.store
    creds.set("admin", "new-pw", SCRAM_SHA_512)
    assert client.get("/v1/cluster", headers=basic("admin")).status_code == 401
    assert client.get("/v1/cluster", headers=basic("admin", "new-pw")).status_code == 200


def test_failed_attempts_slow_the_host_down() -> None:
    client, app = secure_app(tracker=AuthFailureTracker(free_failures=2, base_delay_s=60))
    for _ in range(2):
        assert client.get("/v1/cluster", headers=basic("admin", "guess")).status_code == 401
    before = app.state.basic_auth.verifications
    slowed = client.get("/v1/cluster", headers=basic("admin"))  # even the right password waits its turn
    assert slowed.status_code == 401 and int(slowed.headers["retry-after"]) >= 1
    assert app.state.basic_auth.verifications == before  # refused without spending a PBKDF2


def test_lists_show_only_what_the_principal_may_describe() -> None:
    client, app = secure_app([acl("User:alice", "READ", "TOPIC", "t1")])

    async def topic_names() -> list[str]:
        return ["t1", "t2"]

    app.state.controller.topics = SimpleNamespace(topic_names=topic_names)
    assert client.get("/v1/topics", headers=basic("alice")).json() == {"topics": ["t1"]}
    assert client.get("/v1/topics", headers=basic("admin")).json() == {"topics": ["t1", "t2"]}
    assert client.get("/v1/topics", headers=basic("nobody")).status_code == 403


def test_cluster_view_hides_incarnations_from_who_may_not_describe_the_cluster() -> None:
    client, _ = secure_app([acl("User:alice", "READ", "TOPIC", "t1")])
    assert client.get("/v1/cluster", headers=basic("nobody")).status_code == 403  # no right at all
    hidden = client.get("/v1/cluster", headers=basic("alice")).json()["brokers"][0]
    assert hidden["incarnation"] is None and hidden["address"] == "10.0.0.1:9100"
    shown = client.get("/v1/cluster", headers=basic("admin")).json()["brokers"][0]
    assert shown["incarnation"] == "1700-a"
    plain = ControllerApi(Store())  # type: ignore[arg-type]
    assert TestClient(create_app(plain)).get("/v1/cluster").json()["brokers"][0] == {
        "id": 1, "address": "10.0.0.1:9000", "rack": None, "incarnation": "1700-a", "metrics": None, "kafka": None}


# -- the controller's gRPC service: every method refuses a principal without rights ------------------------

BROKER_1 = "CN=broker-1,OU=tidelog-service"
BROKER_2 = "CN=broker-2,OU=tidelog-service"


class _Context:
    def peer(self) -> str:
        return "ipv4:10.0.0.9:5555"

    async def abort(self, code: Any, details: str) -> None:
        raise AssertionError(f"aborted: {details}")


GRPC_CALLS = {
    "AlterPartition": pb.AlterPartitionRequest(broker_id=1, incarnation="1700-a", topic="t", partition=0,
                                               new_isr=[1]),
    "ControlledShutdown": pb.ControlledShutdownRequest(broker_id=1, incarnation="1700-a"),
    "AlterPartitionReassignments": pb.AlterPartitionReassignmentsRequest(partitions=[
        pb.ReassignablePartition(topic="t", partition=0, replicas=[1])]),
    "ListPartitionReassignments": pb.ListPartitionReassignmentsRequest(),
}


def _grpc(method: str, principal: str, subject: str | None = None) -> Any:
    c = ControllerApi(Store())  # type: ignore[arg-type]
    c.election = SimpleNamespace(active=False)  # type: ignore[assignment]
    c.security = SimpleNamespace(enabled=True, tls=None, store=None, authorizer=Authorizer(
        [acl(f"User:{BROKER_1}", "CLUSTER_ACTION", "CLUSTER", "kafka-cluster"),
         acl(f"User:{BROKER_2}", "CLUSTER_ACTION", "CLUSTER", "kafka-cluster")], super_users="User:admin"))
    server = HandlerRecorder()
    add_controller_service(ControllerServicer(c), server)
    assert set(server.handlers) == set(GRPC_CALLS), "a Controller method without an authorization case"
    request_context.set_principal_resolver(lambda context: (principal, subject))
    try:
        return asyncio.run(server.handlers[method].unary_unary(GRPC_CALLS[method], _Context()))
    finally:
        request_context.set_principal_resolver(request_context.anonymous)


def test_every_controller_method_refuses_a_principal_without_rights() -> None:
    for method in GRPC_CALLS:
        assert _grpc(method, "mallory").error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED, method


def test_broker_rpcs_only_from_that_broker_s_certificate() -> None:
    for method in ("AlterPartition", "ControlledShutdown"):
        # the admin user (a super user) holding the incarnation /v1/cluster used to publish: refused
        assert _grpc(method, "admin").error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert _grpc(method, BROKER_2, BROKER_2).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert _grpc(method, BROKER_1, BROKER_1).error_code == ErrorCode.NOT_CONTROLLER  # let in: a standby
    assert _grpc("ListPartitionReassignments", "admin").error_code == ErrorCode.NOT_CONTROLLER


def test_denials_and_admin_changes_are_audited(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    async def deleted(c: Any, ctx: Any, request: Any) -> None:
        return None

    monkeypatch.setattr(delete_topic_api, "delete_topic", deleted)
    client, _ = secure_app([acl("User:alice", "DELETE", "TOPIC", "t1")])
    audit.configure(str(tmp_path / "audit.log"))
    try:
        assert client.delete("/v1/topics/t2", headers=basic("alice")).status_code == 403
        assert client.delete("/v1/topics/t1", headers=basic("alice")).status_code == 204
        assert client.delete("/v1/topics/t1", headers=basic("alice", "nope")).status_code == 401
        assert audit.current().flush()
        lines = [json.loads(line) for line in (tmp_path / "audit.log").read_text().splitlines()]
    finally:
        audit.configure(None)
    assert [(e["kind"], e["principal"], e["door"], e["resource"]) for e in lines] == [
        ("authorization_denied", "User:alice", "rest", "TOPIC:t2"),
        ("admin_change", "User:alice", "rest", "TOPIC:t1"),
        ("authentication_failure", "User:alice", "rest", ""),
    ]
