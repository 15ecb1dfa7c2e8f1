"""``/v1/acls`` and ``/v1/users`` on the controller's app, over a real etcd (a bare one, started once):
bindings and salted credentials land in etcd as ``SecurityStore`` keys them; Kafka's filter semantics for
describe and delete; bad bodies and filters are 400s naming the field; every change is audited once, in
detail (not again by the app's per-request audit)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from services.controller.api import ControllerApi
from services.controller.rest.app import create_app
from shared.cli.launcher import etcd_binary, free_port
from shared.metadata.store import MetadataStore
from shared.security import audit
from shared.security.acl import acl
from shared.security.acl_store import SecurityKeys
from shared.security.scram import SCRAM_SHA_512, ScramCredential, verify_password


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    data = tmp_path_factory.mktemp("etcd")
    client, peer = free_port(), free_port()
    argv = [
        etcd_binary(), "--name", "rest-test", "--data-dir", str(data / "etcd"),
        "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
        "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
        "--initial-cluster", f"rest-test=http://127.0.0.1:{peer}",
        "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}", "--log-level", "warn",
    ]
    with open(data / "etcd.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{client}/health", timeout=0.5).json().get("health") == "true":
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "etcd did not start"
            time.sleep(0.1)
        yield ("127.0.0.1", client)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Admin:
    """A TestClient on the controller app with the two routers, and its metadata store (same event loop)."""

    def __init__(self, client: TestClient, md: MetadataStore) -> None:
        self.client, self.md = client, md

    def etcd_keys(self, prefix: bytes) -> dict[bytes, Any]:
        got = self.client.portal.call(self.md.get_prefix, prefix)  # type: ignore[union-attr]
        return {k: v for k, (v, _c, _m) in got.items()}


@pytest.fixture
def admin(etcd: tuple[str, int], tmp_path: Path) -> Iterator[Admin]:
    md = MetadataStore(etcd, f"rest-{uuid.uuid4().hex[:8]}")
    api = ControllerApi(md)
    app = create_app(api)
    audit.configure(str(tmp_path / "audit.log"))
    with TestClient(app) as client:
        client.portal.call(md.connect, 10)  # type: ignore[union-attr]
        yield Admin(client, md)
        client.portal.call(md.close)  # type: ignore[union-attr]
    audit.configure(None)


def _audit_lines(tmp_path: Path) -> list[dict[str, Any]]:
    assert audit.current().flush()
    return [json.loads(line) for line in (tmp_path / "audit.log").read_text().splitlines()]


def _binding(principal: str = "User:alice", operation: str = "READ", resource_type: str = "TOPIC",
             name: str = "orders", **kw: str) -> dict[str, str]:
    return {"principal": principal, "operation": operation, "resource_type": resource_type, "resource_name": name,
            **kw}


BINDINGS = [
    _binding(),
    _binding(operation="write", resource_type="topic", name="orders-", pattern_type="prefixed"),
    _binding("User:*", "DESCRIBE", name="*"),
    _binding("User:bob", "READ", name="orders", permission_type="DENY", host="10.0.0.7"),
    _binding("User:alice", "READ", "GROUP", "billing"),
    _binding("User:ops", "ALTER", "CLUSTER", "kafka-cluster"),
]


def _names(answer: dict[str, Any]) -> set[tuple[str, str, str, str, str]]:
    return {(a["principal"], a["operation"], a["resource_type"], a["resource_name"], a["pattern_type"])
            for a in answer["acls"]}


# -- ACLs ---------------------------------------------------------------------------------------------------


def test_created_bindings_land_in_etcd_once(admin: Admin, tmp_path: Path) -> None:
    r = admin.client.post("/v1/acls", json={"acls": BINDINGS})
    assert r.status_code == 200, r.text
    assert len(r.json()["created"]) == len(BINDINGS) and r.json()["existing"] == []
    keys = SecurityKeys(admin.md.keys.root)
    stored = admin.etcd_keys(keys.acls_prefix())
    expected = acl("User:alice", "WRITE", "TOPIC", "orders-", pattern_type="PREFIXED")
    assert stored[keys.acl(expected)]["operation"] == "WRITE"
    assert stored[keys.acl(acl("User:bob", "READ", "TOPIC", "orders", permission="DENY", host="10.0.0.7"))]
    assert len(stored) == len(BINDINGS)
    again = admin.client.post("/v1/acls", json={"acls": BINDINGS[:2]}).json()
    assert again["created"] == [] and len(again["existing"]) == 2
    changes = [e for e in _audit_lines(tmp_path) if e["kind"] == "admin_change"]
    assert len(changes) == len(BINDINGS)  # the repeat changed nothing, so audited nothing
    first = changes[0]
    assert (first["principal"], first["door"], first["operation"], first["allowed"]) == (
        "User:ANONYMOUS", "rest", "CreateAcls", True)
    assert {e["resource"] for e in changes} >= {"TOPIC:PREFIXED:orders-", "CLUSTER:LITERAL:kafka-cluster"}


def test_describe_filters_as_kafka(admin: Admin) -> None:
    assert admin.client.post("/v1/acls", json={"acls": BINDINGS}).status_code == 200
    get = admin.client.get
    assert len(get("/v1/acls").json()["acls"]) == len(BINDINGS)
    # ANY (the default): the name compared exactly, across pattern types
    assert _names(get("/v1/acls", params={"resource_name": "orders"}).json()) == {
        ("User:alice", "READ", "TOPIC", "orders", "LITERAL"), ("User:bob", "READ", "TOPIC", "orders", "LITERAL")}
    # MATCH: everything that applies to topic orders-eu: the prefix and the wildcard
    matched = get("/v1/acls", params={"resource_type": "topic", "resource_name": "orders-eu",
                                      "pattern_type": "match"}).json()
    assert _names(matched) == {("User:alice", "WRITE", "TOPIC", "orders-", "PREFIXED"),
                               ("User:*", "DESCRIBE", "TOPIC", "*", "LITERAL")}
    assert _names(get("/v1/acls", params={"pattern_type": "PREFIXED"}).json()) == {
        ("User:alice", "WRITE", "TOPIC", "orders-", "PREFIXED")}
    # the principal filter is exact: User:alice does not select User:*
    assert {a["principal"] for a in get("/v1/acls", params={"principal": "User:alice"}).json()["acls"]} == {
        "User:alice"}
    assert len(get("/v1/acls", params={"permission": "DENY", "host": "10.0.0.7"}).json()["acls"]) == 1
    assert len(get("/v1/acls", params={"resource_type": "GROUP", "operation": "READ"}).json()["acls"]) == 1


def test_delete_returns_what_the_filter_matched(admin: Admin, tmp_path: Path) -> None:
    assert admin.client.post("/v1/acls", json={"acls": BINDINGS}).status_code == 200
    gone = admin.client.delete("/v1/acls", params={"resource_type": "TOPIC", "resource_name": "orders-eu",
                                                   "pattern_type": "MATCH"})
    assert gone.status_code == 200, gone.text
    assert _names(gone.json()) == {("User:alice", "WRITE", "TOPIC", "orders-", "PREFIXED"),
                                   ("User:*", "DESCRIBE", "TOPIC", "*", "LITERAL")}
    left = admin.client.get("/v1/acls").json()
    assert len(left["acls"]) == len(BINDINGS) - 2
    assert admin.client.delete("/v1/acls", params={"principal": "User:nobody"}).json() == {"acls": []}
    everything = admin.client.delete("/v1/acls").json()  # DeleteAcls with an ANY filter: all of them
    assert len(everything["acls"]) == len(BINDINGS) - 2
    assert admin.etcd_keys(SecurityKeys(admin.md.keys.root).acls_prefix()) == {}
    deletes = [e for e in _audit_lines(tmp_path) if e["operation"] == "DeleteAcls"]
    assert len(deletes) == len(BINDINGS)


BAD_ACLS = [
    (_binding(principal="alice"), "body.acls.0.principal", "'alice'"),
    (_binding(principal="Group:ops"), "body.acls.0.principal", "User:<name>"),
    (_binding(operation="FLY"), "body.acls.0.operation", ""),
    (_binding(operation="ANY"), "body.acls.0.operation", ""),
    (_binding(resource_type="ANY"), "body.acls.0.resource_type", ""),
    (_binding(pattern_type="MATCH"), "body.acls.0.pattern_type", ""),
    (_binding(host="example.com"), "body.acls.0.host", "IP address"),
    (_binding(permission_type="MAYBE"), "body.acls.0.permission_type", ""),
    (_binding(name=""), "body.acls.0.resource_name", ""),
    ({**_binding(), "extra": 1}, "body.acls.0.extra", ""),
]


@pytest.mark.parametrize(("binding", "field", "text"), BAD_ACLS, ids=[f for _, f, _ in BAD_ACLS])
def test_bad_bindings_are_400_naming_the_field(admin: Admin, binding: dict[str, Any], field: str, text: str) -> None:
    r = admin.client.post("/v1/acls", json={"acls": [_binding(name="fine"), binding]})
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["error"] == "INVALID_REQUEST" and field.replace(".0.", ".1.") in body["message"], body
    assert text in body["message"]
    assert admin.client.get("/v1/acls").json() == {"acls": []}  # all or none


@pytest.mark.parametrize(("binding", "text"), [
    (_binding(resource_type="CLUSTER", name="mine"), "kafka-cluster"),
    (_binding(name="*", pattern_type="PREFIXED"), "LITERAL '*'"),
])
def test_bindings_kafka_refuses_are_400(admin: Admin, binding: dict[str, Any], text: str) -> None:
    r = admin.client.post("/v1/acls", json={"acls": [binding]})
    assert (r.status_code, r.json()["error"]) == (400, "INVALID_REQUEST") and text in r.json()["message"]


@pytest.mark.parametrize(("params", "field"), [
    ({"principal": "alice"}, "query.principal"),
    ({"pattern_type": "GLOB"}, "query.pattern_type"),
    ({"operation": "FLY"}, "query.operation"),
    ({"resource_type": "BROKER"}, "query.resource_type"),
    ({"host": "not-an-ip"}, "query.host"),
])
def test_bad_filters_are_400_naming_the_parameter(admin: Admin, params: dict[str, str], field: str) -> None:
    for method in ("GET", "DELETE"):
        r = admin.client.request(method, "/v1/acls", params=params)
        assert r.status_code == 400 and field in r.json()["message"], r.text


# -- users --------------------------------------------------------------------------------------------------


def test_users_round_trip_without_ever_answering_a_secret(admin: Admin, tmp_path: Path) -> None:
    c = admin.client
    r = c.post("/v1/users", json={"name": "alice", "password": "s3cret-pw", "mechanism": "scram-sha-512",
                                  "iterations": 8192})
    assert r.status_code == 201 and r.json() == {"name": "alice", "mechanism": "SCRAM-SHA-512", "iterations": 8192,
                                                 "created": True}
    assert c.post("/v1/users", json={"name": "alice", "password": "other", "mechanism": "SCRAM-SHA-256"}
                  ).status_code == 201
    replaced = c.post("/v1/users", json={"name": "alice", "password": "s3cret-pw2", "iterations": 8192})
    assert replaced.status_code == 200 and replaced.json()["created"] is False
    listed = c.get("/v1/users")
    assert listed.json() == {"users": [{"name": "alice", "mechanisms": [
        {"mechanism": "SCRAM-SHA-256", "iterations": 4096}, {"mechanism": "SCRAM-SHA-512", "iterations": 8192}]}]}
    keys = SecurityKeys(admin.md.keys.root)
    stored = admin.etcd_keys(keys.users_prefix())
    value = stored[keys.user("alice", SCRAM_SHA_512)]
    cred = ScramCredential.from_kafka_string(value["credential"])
    assert verify_password("s3cret-pw2", cred, SCRAM_SHA_512) and cred.iterations == 8192
    everything = json.dumps({k.decode(): v for k, v in stored.items()}) + listed.text
    audit_text = (tmp_path / "audit.log").read_text() if audit.current().flush() else ""
    for secret in ("s3cret-pw", "other"):
        assert secret not in everything and secret not in audit_text
    assert [e["detail"].split()[0] for e in _audit_lines(tmp_path)] == ["create", "create", "replace"]

    gone = c.delete("/v1/users/alice", params={"mechanism": "SCRAM-SHA-256"})
    assert gone.status_code == 204
    again = c.delete("/v1/users/alice", params={"mechanism": "SCRAM-SHA-256"})
    assert again.status_code == 404 and again.json()["error"] == "RESOURCE_NOT_FOUND"
    assert c.delete("/v1/users/alice").status_code == 204
    assert c.get("/v1/users").json() == {"users": []}
    assert c.delete("/v1/users/alice").status_code == 404
    assert admin.etcd_keys(keys.users_prefix()) == {}


@pytest.mark.parametrize(("body", "field"), [
    ({"name": "alice", "password": "pw-SECRET", "iterations": 1000}, "body.iterations"),
    ({"name": "alice", "password": "pw-SECRET", "iterations": 20000}, "body.iterations"),
    ({"name": "alice", "password": "pw-SECRET", "mechanism": "SCRAM-SHA-1"}, "body.mechanism"),
    ({"name": "alice", "password": ""}, "body.password"),
    ({"name": "a/b", "password": "pw-SECRET"}, "body.name"),
    ({"name": "", "password": "pw-SECRET"}, "body.name"),
    ({"password": "pw-SECRET"}, "body.name"),
    ({"name": "alice", "password": "pw-SECRET", "salt": "x"}, "body.salt"),
])
def test_bad_user_bodies_are_400_naming_the_field(admin: Admin, body: dict[str, Any], field: str) -> None:
    r = admin.client.post("/v1/users", json=body)
    assert r.status_code == 400 and field in r.json()["message"], r.text
    assert "pw-SECRET" not in r.text  # the password is not echoed
    r = admin.client.delete("/v1/users/alice", params={"mechanism": "MD5"})
    assert r.status_code == 400 and "query.mechanism" in r.json()["message"]


def test_openapi_documents_the_routes() -> None:
    app = create_app(None)
    paths = app.openapi()["paths"]
    assert set(paths["/v1/acls"]) == {"get", "post", "delete"}
    assert set(paths["/v1/users"]) == {"get", "post"} and set(paths["/v1/users/{name}"]) == {"delete"}
    assert {"200", "201", "400"} <= set(paths["/v1/users"]["post"]["responses"])
    assert {"204", "404"} <= set(paths["/v1/users/{name}"]["delete"]["responses"])
    assert "422" not in paths["/v1/acls"]["post"]["responses"]
    params = {p["name"] for p in paths["/v1/acls"]["get"]["parameters"]}
    assert params == {"resource_type", "resource_name", "pattern_type", "principal", "host", "operation",
                      "permission"}
