"""``/v1/reassignments`` bodies that do not validate are refused with 400 and a message naming the field,
before any API function runs; the gRPC door answers NOT_CONTROLLER on a standby."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from services.controller import grpc_reassignments
from services.controller.api import ControllerApi
from services.controller.rest.app import create_app
from shared.errors import ErrorCode
from shared.metadata.keys import Keys
from shared.proto import tidelog_pb2 as pb
from shared.request_context import RequestContext


def _api(active: bool) -> ControllerApi:
    api = ControllerApi(SimpleNamespace(keys=Keys("test")))  # type: ignore[arg-type]
    api.election = SimpleNamespace(active=active)  # type: ignore[assignment]
    return api


BAD = [
    ("POST", "/v1/reassignments", None, "body"),
    ("POST", "/v1/reassignments", {"partitions": []}, "body.partitions"),
    ("POST", "/v1/reassignments", {"version": 2, "partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]},
     "body.version"),
    ("POST", "/v1/reassignments", {"version": 1, "partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]},
     "body.partitions.0.partition"),
    ("POST", "/v1/reassignments", {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": ["1"]}]},
     "body.partitions.0.replicas.0"),
    ("POST", "/v1/reassignments", {"version": 1, "partitions": [{"topic": "t", "partition": 0}]},
     "body.partitions.0.replicas"),
    ("POST", "/v1/reassignments", {"version": 1, "partitions": [{"topic": "a/b", "partition": 0, "replicas": [1]}]},
     "body.partitions.0.topic"),
    ("POST", "/v1/reassignments", {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1],
                                                                "extra": 1}]}, "body.partitions.0.extra"),
    ("DELETE", "/v1/reassignments", {"partitions": [{"topic": "t"}]}, "body.partitions.0.partition"),
    ("POST", "/v1/reassignments/generate", {"topics": [], "broker_list": [1]}, "body.topics"),
    ("POST", "/v1/reassignments/decommission-plan", {"broker": "1"}, "body.broker"),
    ("POST", "/v1/reassignments/replication-factor-plan", {"topic": "t", "replication_factor": 0},
     "body.replication_factor"),
]


@pytest.mark.parametrize(("method", "url", "body", "field"), BAD, ids=[f"{m} {u} {f}" for m, u, _, f in BAD])
def test_bad_bodies_are_400_naming_the_field(method: str, url: str, body: object, field: str) -> None:
    client = TestClient(create_app(_api(active=True)))
    r = client.request(method, url, json=body)
    assert r.status_code == 400, r.text
    got = r.json()
    assert got["error"] == "INVALID_REQUEST"
    assert any(d["field"] == field for d in got["details"]), got
    assert field in got["message"]


def test_log_dirs_other_than_any_are_refused() -> None:
    from services.controller.api.alter_partition_reassignments import ReassignmentPlan, requests_of
    from shared.errors import TidelogError

    plan = ReassignmentPlan.model_validate({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}]})
    with pytest.raises(TidelogError, match="one directory per replica"):
        requests_of(plan)
    plan = ReassignmentPlan.model_validate({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/data"]}]})
    with pytest.raises(TidelogError, match='only "any"'):
        requests_of(plan)


def test_grpc_on_a_standby_answers_not_controller() -> None:
    ctx = RequestContext(api="x", client_id="", principal="", peer="", arrival=0.0)
    alter = asyncio.run(grpc_reassignments.alter(_api(active=False), ctx, pb.AlterPartitionReassignmentsRequest(
        partitions=[pb.ReassignablePartition(topic="t", partition=0, replicas=[1])])))
    listed = asyncio.run(grpc_reassignments.list_(_api(active=False), ctx, pb.ListPartitionReassignmentsRequest()))
    assert alter.error_code == listed.error_code == ErrorCode.NOT_CONTROLLER


def test_grpc_bad_request_is_invalid_request() -> None:
    ctx = RequestContext(api="x", client_id="", principal="", peer="", arrival=0.0)
    got = asyncio.run(grpc_reassignments.alter(_api(active=True), ctx, pb.AlterPartitionReassignmentsRequest(
        partitions=[pb.ReassignablePartition(topic="t", partition=-1, replicas=[1])])))
    assert got.error_code == ErrorCode.INVALID_REQUEST and "partition" in got.error_message
