"""What every console router shares: rendering a page, reading a posted form, reaching the app's clients.

The clients are the app's own on a plaintext cluster, and the signed-in user's (``request.state.session``,
``services.console.auth``) on a secure one, so every router acts as the user without knowing it."""

from __future__ import annotations

import datetime as dt
import os
import re
from typing import Any
from urllib.parse import parse_qs

import grpc
import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse

from services.console.display import parse_int as parse_int  # re-exported: the routers' forms use it
from services.console.logs import LogReader, RecordSender
from services.console.upstream import RestApi, UpstreamError

HERE = os.path.dirname(os.path.abspath(__file__))
#: The largest form body accepted (a produced value of 1 MiB, typed or pasted, plus the rest).
MAX_FORM_BYTES = 2 * 1024 * 1024 + 65536


def templates() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(HERE, "templates")),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["ms"] = format_ms
    env.filters["bytes"] = format_bytes
    env.filters["num"] = format_number
    return env


def format_number(n: Any) -> str:
    """1048576.0 -> "1048576", 0.5 -> "0.5"; anything else as it is."""
    if isinstance(n, float) and n.is_integer() and abs(n) < 1e18:
        return str(int(n))
    return str(n)


def format_bytes(n: Any) -> str:
    """1536 -> "1.5 KiB"; None -> "-"."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def format_ms(ms: Any) -> str:
    """A timestamp in ms as UTC ISO 8601 with milliseconds; anything else as it is."""
    try:
        return dt.datetime.fromtimestamp(int(ms) / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    except (TypeError, ValueError, OverflowError, OSError):
        return str(ms)


def render(request: Request, template: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
    env: jinja2.Environment = request.app.state.templates
    session = getattr(request.state, "session", None)
    page = env.get_template(template).render(request=request, path=request.url.path,
                                             login_user=session.user if session is not None else None, **context)
    return HTMLResponse(page, status_code=status)


async def form(request: Request) -> dict[str, str]:
    """A posted ``application/x-www-form-urlencoded`` body (last value of each name)."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise UpstreamError("INVALID_REQUEST", f"form of {len(body)} bytes is over {MAX_FORM_BYTES}", 413)
    parsed = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {k: v[-1] for k, v in parsed.items()}


_KAFKA_NAME = re.compile(r"\b([A-Z_]+_(?:AUTHORIZATION|AUTHENTICATION)_FAILED)\b")


def status_of(name: str) -> int:
    """The HTTP status of a refusal by its Kafka name: 401 for authentication, 403 for authorization."""
    if name == "SASL_AUTHENTICATION_FAILED":
        return 401
    return 403 if name.endswith("_AUTHORIZATION_FAILED") else 400


def form_error(exc: Exception) -> UpstreamError:
    """Any failure of a form's action (or of a read over gRPC) as (Kafka error name, message)."""
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):  # a refusal the client did not translate
        details = str(exc.details() if hasattr(exc, "details") else exc) or ""
        found = _KAFKA_NAME.search(details)
        if found or exc.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
            name = found.group(1) if found else ("SASL_AUTHENTICATION_FAILED"
                                                 if exc.code() == grpc.StatusCode.UNAUTHENTICATED
                                                 else "CLUSTER_AUTHORIZATION_FAILED")
            return UpstreamError(name, details, status_of(name))
    code = getattr(exc, "code", None)
    name = getattr(code, "name", None) or ("INVALID_REQUEST" if isinstance(exc, ValueError) else "UNKNOWN_SERVER_ERROR")
    if not isinstance(name, str):
        name = "UNKNOWN_SERVER_ERROR"
    return UpstreamError(name, str(exc.args[0] if exc.args else exc), status_of(name))


def metrics(request: Request) -> Any:
    return request.app.state.metrics


def rest(request: Request) -> RestApi:
    session = getattr(request.state, "session", None)
    return request.app.state.rest if session is None else session.rest


def reader(request: Request) -> LogReader:
    session = getattr(request.state, "session", None)
    return request.app.state.reader if session is None else session.reader


def sender(request: Request) -> RecordSender:
    session = getattr(request.state, "session", None)
    return request.app.state.sender if session is None else session.sender


def client_settings(request: Request) -> dict[str, Any]:
    """kafka-python's security settings for a new client acting for this request (none when plaintext)."""
    session = getattr(request.state, "session", None)
    return {} if session is None else dict(session.client_settings)
