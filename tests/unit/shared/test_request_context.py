"""The one entry of every request: context, authorization hook, and the gRPC rewrite that puts it in
front of every method of a service (so a method added later cannot skip it)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from shared.grpc_codecs import RewrittenHandlers
from shared.proto import coordinator_pb2 as cpb
from shared.proto import coordinator_pb2_grpc as cpb_grpc
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.quota.entities import ANONYMOUS
from shared.request_context import NotAuthorized, RequestContext, allow_all, authorized_handlers, enter


class Aborted(Exception):
    pass


class FakeContext:
    def __init__(self) -> None:
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise Aborted(details)


class Recorder:
    """Stands in for the gRPC server: keeps the handlers registered."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.handlers.update(handlers)


class Servicer:
    """Answers every method: records which ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if not name[:1].isupper():
            raise AttributeError(name)

        async def method(request: Any, context: Any) -> str:
            self.ran.append(name)
            return name

        return method


def _handlers(add: Any, authorize: Any) -> tuple[Recorder, Servicer]:
    recorder, servicer = Recorder(), Servicer()
    add(servicer, RewrittenHandlers(recorder, authorized_handlers(authorize)))
    return recorder, servicer


async def _call(h: grpc.RpcMethodHandler, request: Any, context: FakeContext) -> Any:
    behavior = h.unary_unary or h.unary_stream or h.stream_unary or h.stream_stream
    out = behavior(request, context)
    if hasattr(out, "__aiter__"):
        return [x async for x in out]
    return await out


@pytest.mark.parametrize("add, service", [
    (cpb_grpc.add_GroupCoordinatorServicer_to_server, cpb.DESCRIPTOR.services_by_name["GroupCoordinator"]),
    (pb_grpc.add_ControllerServicer_to_server, pb.DESCRIPTOR.services_by_name["Controller"]),
])
def test_every_method_of_a_service_is_refused_by_a_denying_hook(add: Any, service: Any) -> None:
    asked: list[RequestContext] = []

    def deny(ctx: RequestContext) -> bool:
        asked.append(ctx)
        return False

    recorder, servicer = _handlers(add, deny)
    methods = [m.name for m in service.methods]
    assert sorted(recorder.handlers) == sorted(methods)
    for name in methods:
        context = FakeContext()
        with pytest.raises(Aborted):
            asyncio.run(_call(recorder.handlers[name], object(), context))
        assert context.aborted is not None and context.aborted[0] == grpc.StatusCode.PERMISSION_DENIED
    assert servicer.ran == []  # no behaviour ran
    assert [c.api for c in asked] == methods and all(c.principal == ANONYMOUS for c in asked)


def test_allowed_methods_run_with_their_context() -> None:
    asked: list[RequestContext] = []

    def allow(ctx: RequestContext) -> bool:
        asked.append(ctx)
        return True

    recorder, servicer = _handlers(cpb_grpc.add_GroupCoordinatorServicer_to_server, allow)
    request = cpb.ConsumerGroupHeartbeatRequest(group_id="g", client_id="app-1")
    assert asyncio.run(_call(recorder.handlers["ConsumerGroupHeartbeat"], request, FakeContext())) \
        == "ConsumerGroupHeartbeat"
    assert servicer.ran == ["ConsumerGroupHeartbeat"]
    assert asked[0].client_id == "app-1" and asked[0].peer == "ipv4:127.0.0.1:5555"


def test_enter_asks_the_hook() -> None:
    ctx = enter("Metadata", "c", "peer", allow_all, clock=lambda: 5.0)
    assert (ctx.api, ctx.client_id, ctx.principal, ctx.peer, ctx.arrival) == ("Metadata", "c", ANONYMOUS, "peer", 5.0)
    with pytest.raises(NotAuthorized, match="may not call Produce"):
        enter("Produce", "c", "peer", lambda ctx: False)


def test_every_rest_route_enters_through_the_request_context() -> None:
    """The controller's REST API: a route the hook refuses answers 403 before its handler runs; the docs
    stay open."""
    from fastapi.testclient import TestClient

    from services.controller.rest.app import create_app

    asked: list[RequestContext] = []

    def deny(ctx: RequestContext) -> bool:
        asked.append(ctx)
        return False

    app = create_app(controller=None)  # no route may reach the controller
    app.state.authorize = deny
    client = TestClient(app)
    for method, path in (("GET", "/v1/cluster"), ("GET", "/v1/topics"), ("DELETE", "/v1/topics/doomed"),
                         ("POST", "/v1/quotas/alter")):
        r = client.request(method, path, headers={"x-client-id": "ops"})
        assert r.status_code == 403, (path, r.text)
        assert r.json()["error"] == "CLUSTER_AUTHORIZATION_FAILED"
    assert [c.api for c in asked] == ["GET /v1/cluster", "GET /v1/topics", "DELETE /v1/topics/{name}",
                                      "POST /v1/quotas/alter"]
    assert all(c.client_id == "ops" for c in asked)
    assert client.get("/openapi.json").status_code == 200
