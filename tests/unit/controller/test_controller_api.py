"""The controller's request layer: every REST route and every gRPC method hands the request context its
door let in (the one the authorization hook judged) to its API function in ``services/controller/api``."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
from types import ModuleType, SimpleNamespace
from typing import Any

import grpc
import pytest
from fastapi.testclient import TestClient

import services.controller.api as api_package
from services.controller.api import ControllerApi
from services.controller.api.alter_partition import AlterPartitionResponse
from services.controller.api.alter_partition_reassignments import AlterReassignmentsResult
from services.controller.api.controlled_shutdown import ControlledShutdownResponse
from services.controller.api.list_partition_reassignments import ReassignmentList
from services.controller.grpc_api import ControllerServicer, add_to_server
from services.controller.rest.app import create_app
from shared.errors import ErrorCode, TidelogError
from shared.metadata.keys import Keys
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.request_context import RequestContext


def _api_modules() -> list[ModuleType]:
    return [importlib.import_module(f"{api_package.__name__}.{m.name}") for m in pkgutil.iter_modules(api_package.__path__)]


def _api_functions() -> list[tuple[ModuleType, str]]:
    """Every ``async def <api>(c, ctx, request)`` of the request layer."""
    found = []
    for module in _api_modules():
        for name, fn in vars(module).items():
            if inspect.iscoroutinefunction(fn) and fn.__module__ == module.__name__ \
                    and list(inspect.signature(fn).parameters) == ["c", "ctx", "request"]:
                found.append((module, name))
    return found


class Calls:
    """Stands in for every API function: records (api, ctx, request) and answers ``answer(api)``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, answer: Any) -> None:
        self.seen: list[tuple[str, RequestContext, Any]] = []
        for module, name in _api_functions():
            monkeypatch.setattr(module, name, self._recorder(name, answer))

    def _recorder(self, name: str, answer: Any) -> Any:
        async def api(c: ControllerApi, ctx: RequestContext, request: Any) -> Any:
            self.seen.append((name, ctx, request))
            return answer(name)

        return api


def _controller_api(active: bool) -> ControllerApi:
    api = ControllerApi(SimpleNamespace(keys=Keys("test")))  # type: ignore[arg-type]
    api.election = SimpleNamespace(active=active)  # type: ignore[assignment]
    return api


def _refuse(name: str) -> Any:
    raise TidelogError(f"{name} recorded", code=ErrorCode.INVALID_REQUEST)


def test_every_api_module_follows_the_shape() -> None:
    names = sorted(name for _, name in _api_functions())
    assert names == sorted([
        "alter_broker_configs", "describe_broker_configs", "describe_log_dirs",
        "alter_client_quotas", "alter_configs", "alter_partition", "cleaner_status", "controlled_shutdown",
        "create_partitions", "create_topic", "delete_group", "delete_topic", "describe_client_quotas",
        "describe_cluster", "describe_group", "describe_topic", "effective_quotas", "elect_leaders",
        "list_groups", "list_topics", "reset_offsets",
        "alter_partition_reassignments", "cancel_partition_reassignments", "list_partition_reassignments",
        "generate_reassignment", "plan_decommission", "plan_replication_factor",
        "describe_balancer", "pause_balancer", "resume_balancer", "mark_decommissioning", "unmark_decommissioning",
        "abort_transaction", "describe_producers", "describe_transaction", "find_hanging", "list_transactions",
        "create_acls", "delete_acls", "describe_acls", "delete_user", "describe_users", "upsert_user"])


#: (method, route, url, body, API function): one row per REST route.
ROUTES = [
    ("GET", "/v1/acls", "/v1/acls?principal=User:alice", None, "describe_acls"),
    ("POST", "/v1/acls", "/v1/acls", {"acls": [{"resource_type": "TOPIC", "resource_name": "t1",
                                                "principal": "User:alice", "operation": "READ"}]}, "create_acls"),
    ("DELETE", "/v1/acls", "/v1/acls?resource_type=TOPIC&resource_name=t1", None, "delete_acls"),
    ("GET", "/v1/users", "/v1/users", None, "describe_users"),
    ("POST", "/v1/users", "/v1/users", {"name": "alice", "password": "pw"}, "upsert_user"),
    ("DELETE", "/v1/users/{name}", "/v1/users/alice", None, "delete_user"),
    ("GET", "/v1/balancer", "/v1/balancer", None, "describe_balancer"),
    ("POST", "/v1/balancer/pause", "/v1/balancer/pause", None, "pause_balancer"),
    ("POST", "/v1/balancer/resume", "/v1/balancer/resume", None, "resume_balancer"),
    ("POST", "/v1/balancer/decommissioning/{broker}", "/v1/balancer/decommissioning/4", None, "mark_decommissioning"),
    ("DELETE", "/v1/balancer/decommissioning/{broker}", "/v1/balancer/decommissioning/4", None,
     "unmark_decommissioning"),
    ("GET", "/v1/brokers/{broker}/configs", "/v1/brokers/1/configs", None, "describe_broker_configs"),
    ("PATCH", "/v1/brokers/{broker}/configs", "/v1/brokers/1/configs",
     {"configs": {"leader.replication.throttled.rate": 1000}}, "alter_broker_configs"),
    ("GET", "/v1/brokers/{broker}/log-dirs", "/v1/brokers/1/log-dirs", None, "describe_log_dirs"),
    ("GET", "/v1/log-dirs", "/v1/log-dirs?topic=t1", None, "describe_log_dirs"),
    ("GET", "/v1/cleaner", "/v1/cleaner", None, "cleaner_status"),
    ("GET", "/v1/cluster", "/v1/cluster", None, "describe_cluster"),
    ("POST", "/v1/elect-leaders", "/v1/elect-leaders", {"all_topic_partitions": True}, "elect_leaders"),
    ("GET", "/v1/groups", "/v1/groups", None, "list_groups"),
    ("GET", "/v1/groups/{group_id}", "/v1/groups/g1", None, "describe_group"),
    ("DELETE", "/v1/groups/{group_id}", "/v1/groups/g1", None, "delete_group"),
    ("POST", "/v1/groups/{group_id}/offsets/reset", "/v1/groups/g1/offsets/reset",
     {"topic": "t1", "to": "earliest"}, "reset_offsets"),
    ("GET", "/v1/quotas", "/v1/quotas?user=alice", None, "describe_client_quotas"),
    ("POST", "/v1/quotas/alter", "/v1/quotas/alter",
     {"entries": [{"entity": {"user": "alice"}, "ops": [{"key": "producer_byte_rate", "value": 1024}]}]},
     "alter_client_quotas"),
    ("GET", "/v1/quotas/effective", "/v1/quotas/effective?user=alice", None, "effective_quotas"),
    ("GET", "/v1/reassignments", "/v1/reassignments?topic=t1", None, "list_partition_reassignments"),
    ("POST", "/v1/reassignments", "/v1/reassignments",
     {"version": 1, "partitions": [{"topic": "t1", "partition": 0, "replicas": [1, 2]}]}, "alter_partition_reassignments"),
    ("DELETE", "/v1/reassignments", "/v1/reassignments", {"partitions": [{"topic": "t1", "partition": 0}]},
     "cancel_partition_reassignments"),
    ("POST", "/v1/reassignments/generate", "/v1/reassignments/generate", {"topics": ["t1"], "broker_list": [1, 2]},
     "generate_reassignment"),
    ("POST", "/v1/reassignments/decommission-plan", "/v1/reassignments/decommission-plan", {"broker": 1},
     "plan_decommission"),
    ("POST", "/v1/reassignments/replication-factor-plan", "/v1/reassignments/replication-factor-plan",
     {"topic": "t1", "replication_factor": 2}, "plan_replication_factor"),
    ("GET", "/v1/topics", "/v1/topics", None, "list_topics"),
    ("POST", "/v1/topics", "/v1/topics", {"name": "t1", "partitions": 3}, "create_topic"),
    ("GET", "/v1/topics/{name}", "/v1/topics/t1", None, "describe_topic"),
    ("DELETE", "/v1/topics/{name}", "/v1/topics/t1", None, "delete_topic"),
    ("PATCH", "/v1/topics/{name}/configs", "/v1/topics/t1/configs", {"configs": {"retention.ms": "1000"}},
     "alter_configs"),
    ("POST", "/v1/topics/{name}/partitions", "/v1/topics/t1/partitions", {"partitions": 4}, "create_partitions"),
    ("GET", "/v1/transactions", "/v1/transactions?state=Ongoing", None, "list_transactions"),
    ("GET", "/v1/transactions/hanging", "/v1/transactions/hanging?topic=t1", None, "find_hanging"),
    ("GET", "/v1/transactions/producers", "/v1/transactions/producers?topic=t1&partition=0", None, "describe_producers"),
    ("POST", "/v1/transactions/abort", "/v1/transactions/abort", {"topic": "t1", "partition": 0, "start_offset": 5},
     "abort_transaction"),
    ("GET", "/v1/transactions/{transactional_id}", "/v1/transactions/tx1", None, "describe_transaction"),
]


def test_the_table_names_every_rest_route() -> None:
    paths = create_app(controller=None).openapi()["paths"]
    routes = {(method.upper(), path) for path, ops in paths.items() for method in ops}
    assert routes == {(m, path) for m, path, _, _, _ in ROUTES}


def test_every_rest_route_hands_its_context_to_its_api(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls(monkeypatch, _refuse)
    asked: list[RequestContext] = []

    def allow(ctx: RequestContext) -> bool:
        asked.append(ctx)
        return True

    app = create_app(_controller_api(active=True))
    app.state.authorize = allow
    client = TestClient(app)
    for method, route, url, body, api in ROUTES:
        asked.clear()
        calls.seen.clear()
        r = client.request(method, url, json=body, headers={"x-client-id": "ops"})
        assert (r.status_code, r.json()) == (400, {"error": "INVALID_REQUEST", "message": f"{api} recorded"}), url
        assert len(asked) == 1, url  # the app-wide entry and the route's own ``Ctx`` are one context
        assert [name for name, _, _ in calls.seen] == [api] and calls.seen[0][1] is asked[0], url
        assert (asked[0].api, asked[0].client_id) == (f"{method} {route}", "ops")


def test_rest_requests_reach_the_api_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls(monkeypatch, _refuse)
    client = TestClient(create_app(_controller_api(active=True)))
    client.patch("/v1/topics/t1/configs", json={"configs": {"retention.ms": 1000, "segment.ms": None}})
    client.post("/v1/groups/g1/offsets/reset", json={"topic": "t1", "to": "offset", "value": 5})
    client.get("/v1/quotas?client_id=%3Cdefault%3E&strict=true")
    requests = {name: request for name, _, request in calls.seen}
    alter = requests["alter_configs"]
    assert (alter.name, alter.configs) == ("t1", {"retention.ms": 1000, "segment.ms": None})
    reset = requests["reset_offsets"]
    assert (reset.group_id, reset.spec.topic, reset.spec.to, reset.spec.value) == ("g1", "t1", "offset", 5)
    quotas = requests["describe_client_quotas"]
    assert (quotas.user, quotas.client_id, quotas.strict) == (None, "<default>", True)


def test_a_refused_rest_request_reaches_no_api(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls(monkeypatch, _refuse)
    app = create_app(_controller_api(active=True))
    app.state.authorize = lambda ctx: False
    r = TestClient(app).post("/v1/topics", json={"name": "t1"})
    assert (r.status_code, r.json()["error"]) == (403, "CLUSTER_AUTHORIZATION_FAILED")
    assert calls.seen == []


# -- gRPC -------------------------------------------------------------------------------------------------


class Recorder:
    """Stands in for the gRPC server: keeps the handlers registered."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.handlers.update(handlers)


class FakeContext:
    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise RuntimeError(f"aborted: {code} {details}")


GRPC_CALLS = {
    "AlterPartitionReassignments": (pb.AlterPartitionReassignmentsRequest(partitions=[pb.ReassignablePartition(
        topic="t1", partition=0, replicas=[1, 2])]), "alter_partition_reassignments"),
    "ListPartitionReassignments": (pb.ListPartitionReassignmentsRequest(topics=["t1"]), "list_partition_reassignments"),
    "AlterPartition": (pb.AlterPartitionRequest(broker_id=2, incarnation="i", topic="t1", partition=0, leader_epoch=3,
                                                partition_epoch=4, new_isr=[2, 3]), "alter_partition"),
    "ControlledShutdown": (pb.ControlledShutdownRequest(broker_id=2, incarnation="i"), "controlled_shutdown"),
}


def _grpc_handlers(api: ControllerApi, authorize: Any) -> dict[str, grpc.RpcMethodHandler]:
    recorder = Recorder()
    add_to_server(ControllerServicer(api), recorder, authorize)  # type: ignore[arg-type]
    return recorder.handlers


def test_every_grpc_method_hands_its_context_to_its_api(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {"alter_partition": AlterPartitionResponse(ErrorCode.NOT_CONTROLLER, "x"),
               "controlled_shutdown": ControlledShutdownResponse(remaining_leaderships=7),
               "alter_partition_reassignments": AlterReassignmentsResult(partitions=[]),
               "list_partition_reassignments": ReassignmentList(reassignments=[])}
    calls = Calls(monkeypatch, answers.__getitem__)
    asked: list[RequestContext] = []

    def allow(ctx: RequestContext) -> bool:
        asked.append(ctx)
        return True

    handlers = _grpc_handlers(_controller_api(active=True), allow)
    assert sorted(handlers) == sorted(GRPC_CALLS)
    for method, (request, api) in GRPC_CALLS.items():
        asked.clear()
        calls.seen.clear()
        asyncio.run(handlers[method].unary_unary(request, FakeContext()))
        assert [name for name, _, _ in calls.seen] == [api] and calls.seen[0][1] is asked[0]
        assert (asked[0].api, asked[0].peer) == (method, "ipv4:127.0.0.1:5555")
    assert calls.seen[0][2].broker_id == 2


def test_grpc_methods_answer_through_the_api_unpatched() -> None:
    """No active controller: both methods answer NOT_CONTROLLER from their API function."""
    handlers = _grpc_handlers(_controller_api(active=False), lambda ctx: True)
    for method, (request, _) in GRPC_CALLS.items():
        resp = asyncio.run(handlers[method].unary_unary(request, FakeContext()))
        assert (resp.error_code, resp.error_message) == (ErrorCode.NOT_CONTROLLER, "not the active controller")


def test_a_grpc_method_not_entered_has_no_context() -> None:
    servicer = ControllerServicer(_controller_api(active=False))
    with pytest.raises(TypeError):  # registered without the guard, a method lacks its context and does not run
        asyncio.run(servicer.ControlledShutdown(GRPC_CALLS["ControlledShutdown"][0], FakeContext()))  # type: ignore[call-arg]


def test_the_context_reaches_the_api_through_a_real_grpc_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process gRPC server on port 0: the context the hook let in is the one the API function gets,
    call after call (each call is its own task)."""
    calls = Calls(monkeypatch, lambda name: ControlledShutdownResponse(remaining_leaderships=len(calls.seen)))
    asked: list[RequestContext] = []

    def allow(ctx: RequestContext) -> bool:
        asked.append(ctx)
        return True

    async def run() -> list[int]:
        server = grpc.aio.server()
        add_to_server(ControllerServicer(_controller_api(active=True)), server, allow)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                stub = pb_grpc.ControllerStub(ch)
                replies = await asyncio.gather(*(stub.ControlledShutdown(pb.ControlledShutdownRequest(broker_id=b))
                                                 for b in range(5)))
        finally:
            await server.stop(None)
        return [r.remaining_leaderships for r in replies]

    assert sorted(asyncio.run(run())) == [1, 2, 3, 4, 5]
    assert len(asked) == 5  # five calls, five contexts, each handed to one API call
    assert sorted(id(ctx) for _, ctx, _ in calls.seen) == sorted(id(ctx) for ctx in asked)
