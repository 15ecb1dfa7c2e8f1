"""The TransactionCoordinator servicer: every method of the service is registered, enters through the
request context and the authorization hook once, and hands that context to its API module
(``services/coordinator/api/txn_*.py``); a refused call reaches no API."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

import services.coordinator.txn_servicer as servicer_module
from services.coordinator.txn_servicer import TransactionCoordinatorServicer, add_to_server
from shared.proto import transactions_pb2 as tpb
from shared.request_context import RequestContext

SERVICE = tpb.DESCRIPTOR.services_by_name["TransactionCoordinator"]
PEER = "ipv4:127.0.0.1:5555"
API = {"InitProducerId": "txn_init_producer_id", "AddPartitionsToTxn": "txn_add_partitions",
       "AddOffsetsToTxn": "txn_add_offsets", "EndTxn": "txn_end", "DescribeTransactions": "txn_describe",
       "ListTransactions": "txn_list"}


class Aborted(Exception):
    pass


class FakeContext:
    def __init__(self) -> None:
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def peer(self) -> str:
        return PEER

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise Aborted(details)


class Recorder:
    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.handlers.update(handlers)


def _fakes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, RequestContext, Any]]:
    calls: list[tuple[str, Any, RequestContext, Any]] = []
    for method, fn in API.items():
        async def fake(t: Any, ctx: RequestContext, request: Any, method: str = method) -> str:
            calls.append((method, t, ctx, request))
            return method
        monkeypatch.setattr(servicer_module, fn, fake)
    return calls


def test_every_method_hands_its_context_to_its_api(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fakes(monkeypatch)
    entered: list[RequestContext] = []
    service = object()
    server = Recorder()
    add_to_server(TransactionCoordinatorServicer(service), server, lambda ctx: entered.append(ctx) or True)  # type: ignore[arg-type, func-returns-value]
    assert sorted(server.handlers) == sorted(m.name for m in SERVICE.methods) == sorted(API)
    for name, h in server.handlers.items():
        request = object()
        assert asyncio.run(h.unary_unary(request, FakeContext())) == name
        method, t, ctx, got = calls[-1]
        assert (method, t, got) == (name, service, request)
        assert ctx is entered[-1] and (ctx.api, ctx.peer) == (name, PEER)


def test_a_refused_call_reaches_no_api(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fakes(monkeypatch)
    server = Recorder()
    add_to_server(TransactionCoordinatorServicer(object()), server, lambda ctx: False)  # type: ignore[arg-type]
    for h in server.handlers.values():
        context = FakeContext()
        with pytest.raises(Aborted):
            asyncio.run(h.unary_unary(object(), context))
        assert context.aborted is not None and context.aborted[0] == grpc.StatusCode.PERMISSION_DENIED
    assert calls == []
