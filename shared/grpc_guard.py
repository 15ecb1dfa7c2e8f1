"""Server-wide guard over every gRPC method a Tidelog service registers.

``GuardedServer`` stands in for the ``grpc.aio.Server`` while services add
their servicers, and wraps each method handler it is given (generated
``add_*Servicer_to_server`` code, hand-made handlers, the health service):

* the request deserializer never raises: bytes that do not decode become a
  ``BadRequest`` value, which the wrapped method refuses with
  ``INVALID_ARGUMENT`` and a one-line reason, logged as one WARNING line
  (gRPC's default is ``UNKNOWN: Unexpected <class DecodeError>`` and an ERROR
  traceback). A bidirectional or client stream answers the requests before
  the bad one, then fails the same way.
* an unexpected exception in a method ends the call as ``INTERNAL`` with a
  generic message; the traceback goes to the log only, so no server path or
  internal detail reaches the client.

Services added later by other code are covered with nothing to do on their
side. Must not import services.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import descriptor_pool

from shared.request_context import CallRefused

log = logging.getLogger(__name__)
MAX_REASON_CHARS = 200


@dataclass(frozen=True)
class BadRequest:
    """What a guarded deserializer returns for bytes that do not decode."""

    reason: str


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``, bounded, for clients and one-line log records."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    out = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return out[:MAX_REASON_CHARS]


def request_type(method: str) -> str:
    """``ProduceRequest`` for ``/tidelog.v1.Broker/Produce`` (from the protobuf descriptors), else "request"."""
    service, _, name = method.strip("/").partition("/")
    try:
        return descriptor_pool.Default().FindServiceByName(service).FindMethodByName(name).input_type.name
    except (KeyError, AttributeError):
        return "request"


def _guard_deserializer(deserialize: Callable[[bytes], Any], type_name: str) -> Callable[[bytes], Any]:
    def read(data: bytes) -> Any:
        try:
            request = deserialize(data)
        except Exception as exc:  # DecodeError, or anything a hand-written codec raises
            return BadRequest(f"malformed {type_name}: {one_line(exc)}")
        if isinstance(request, Exception):  # a hand-written codec that hands its error to the method
            return BadRequest(f"malformed {type_name}: {one_line(request)}")
        return request

    return read


async def _refuse(method: str, bad: BadRequest, context: grpc.aio.ServicerContext) -> None:
    log.warning("undecodable request refused", extra={"method": method, "reason": bad.reason})
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, bad.reason)


async def _internal(method: str, context: grpc.aio.ServicerContext) -> None:
    log.exception("request failed", extra={"method": method})
    await context.abort(grpc.StatusCode.INTERNAL, f"internal error in {method} (details in the server log)")


_PASS_THROUGH = (grpc.aio.AbortError, grpc.RpcError)


def _unary_unary(method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, BadRequest):
            await _refuse(method, request, context)
        try:
            return await behavior(request, context)
        except CallRefused as exc:  # a bad session token, a connection over its rate: no traceback
            await context.abort(exc.status, str(exc))
        except _PASS_THROUGH:
            raise
        except Exception:
            await _internal(method, context)

    return call


async def _drain(result: Any) -> AsyncIterator[Any]:
    """A streaming method may be an async generator or a coroutine writing with context.write."""
    if hasattr(result, "__aiter__"):
        async for item in result:
            yield item
    else:
        await result


def _unary_stream(method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        if isinstance(request, BadRequest):
            await _refuse(method, request, context)
        try:
            async for item in _drain(behavior(request, context)):
                yield item
        except CallRefused as exc:  # a bad session token, a connection over its rate: no traceback
            await context.abort(exc.status, str(exc))
        except _PASS_THROUGH:
            raise
        except Exception:
            await _internal(method, context)

    return call


class _CheckedRequests:
    """The request stream up to (not including) the first undecodable message."""

    def __init__(self, requests: AsyncIterator[Any]) -> None:
        self.requests = requests
        self.bad: BadRequest | None = None

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for request in self.requests:
            if isinstance(request, BadRequest):
                self.bad = request
                return
            yield request


def _stream_unary(method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        checked = _CheckedRequests(requests)
        try:
            response = await behavior(checked.__aiter__(), context)
        except CallRefused as exc:  # a bad session token, a connection over its rate: no traceback
            await context.abort(exc.status, str(exc))
        except _PASS_THROUGH:
            raise
        except Exception:
            await _internal(method, context)
        if checked.bad is not None:
            await _refuse(method, checked.bad, context)
        return response

    return call


def _stream_stream(method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        checked = _CheckedRequests(requests)
        try:
            async for item in _drain(behavior(checked.__aiter__(), context)):
                yield item
        except CallRefused as exc:  # a bad session token, a connection over its rate: no traceback
            await context.abort(exc.status, str(exc))
        except _PASS_THROUGH:
            raise
        except Exception:
            await _internal(method, context)
        if checked.bad is not None:
            await _refuse(method, checked.bad, context)

    return call


_WRAPPERS = {
    "unary_unary": _unary_unary,
    "unary_stream": _unary_stream,
    "stream_unary": _stream_unary,
    "stream_stream": _stream_stream,
}


def guard_handler(method: str, handler: Any) -> Any:
    """The same ``RpcMethodHandler`` with a non-raising deserializer and a guarded behavior."""
    if handler is None:
        return None
    changes: dict[str, Any] = {}
    if handler.request_deserializer is not None:
        changes["request_deserializer"] = _guard_deserializer(handler.request_deserializer, request_type(method))
    for kind, wrap in _WRAPPERS.items():
        behavior = getattr(handler, kind)
        if behavior is not None:
            changes[kind] = wrap(method, behavior)
    return handler._replace(**changes)


class _GuardedGenericHandler(grpc.GenericRpcHandler):
    def __init__(self, inner: grpc.GenericRpcHandler) -> None:
        self.inner = inner

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        return guard_handler(handler_call_details.method, self.inner.service(handler_call_details))


class GuardedServer:
    """Pass to ``add_*Servicer_to_server`` in place of the server: every handler is guarded."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self.server = server

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self.server.add_generic_rpc_handlers(tuple(_GuardedGenericHandler(h) for h in handlers))

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        guarded = {name: guard_handler(f"/{service}/{name}", h) for name, h in handlers.items()}
        self.server.add_registered_method_handlers(service, guarded)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.server, name)
