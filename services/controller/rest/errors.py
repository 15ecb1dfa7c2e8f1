"""The REST API's error body and the status codes each route documents (reusable by every router).

Every error answer is ``ErrorBody``: Kafka's error name (or ``INVALID_REQUEST``
for a body, path or query that does not validate), a message, and per-field
details for validation errors. ``error_responses(...)`` declares the codes a
route returns, with this schema, in the OpenAPI document; ``document_errors``
drops FastAPI's default 422 (validation errors are answered with 400 here).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from services.controller.api.fields import INT64_MAX, INT64_MIN

#: Group ids as a path segment: as ``NAME_PATTERN`` (services.controller.api.fields), and without '/'.
PATH_NAME_PATTERN = r"^[^\x00-\x1f\x7f-\x9f/]+$"


class FieldError(BaseModel):
    field: str = Field(..., description="where: body.partitions, path.name, ...")
    message: str


class ErrorBody(BaseModel):
    error: str = Field(..., description="Kafka error name (e.g. TOPIC_ALREADY_EXISTS) or INVALID_REQUEST")
    message: str = Field(..., description="what was wrong, in one line")
    details: list[FieldError] | None = Field(None, description="validation errors, one per field")


_DESCRIPTIONS = {
    400: "Invalid request: a body, path or config that does not validate (INVALID_REQUEST, INVALID_CONFIG, ...)",
    404: "Unknown topic or partition (UNKNOWN_TOPIC_OR_PARTITION)",
    409: "The topic already exists (TOPIC_ALREADY_EXISTS)",
    503: "No active controller right now (NOT_CONTROLLER): retry shortly",
}


def error_responses(*codes: int, **described: str) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each code with its description and the ``ErrorBody`` schema.
    ``described`` gives a route's own wording per code (``e404="Unknown group (GROUP_ID_NOT_FOUND)"``)."""
    out: dict[int | str, dict[str, Any]] = {
        code: {"model": ErrorBody, "description": _DESCRIPTIONS[code]} for code in codes}
    for key, text in described.items():
        out[int(key.removeprefix("e"))] = {"model": ErrorBody, "description": text}
    return out


_HTTP_ERRORS = {400: "INVALID_REQUEST", 401: "SASL_AUTHENTICATION_FAILED", 403: "CLUSTER_AUTHORIZATION_FAILED",
                404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}

#: declared on every /v1 route (answered when security is on)
SECURITY_RESPONSES = {
    "401": "No valid credential (SASL_AUTHENTICATION_FAILED): HTTP Basic with a SCRAM user and its password, "
           "when the cluster is secure",
    "403": "The principal lacks the route's right (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, "
           "CLUSTER_AUTHORIZATION_FAILED or TRANSACTIONAL_ID_AUTHORIZATION_FAILED)",
}


def document_errors(app: FastAPI) -> None:
    """Errors the framework raises itself (unparsable body, unknown route, wrong method) answer with
    ``ErrorBody`` too; FastAPI's automatic 422 answers leave the OpenAPI document (we answer 400)."""

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        body = ErrorBody(error=_HTTP_ERRORS.get(exc.status_code, "INVALID_REQUEST"), message=str(exc.detail))
        return JSONResponse(status_code=exc.status_code, content=body.model_dump(exclude_none=True),
                            headers=getattr(exc, "headers", None))

    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            for route, path in schema.get("paths", {}).items():
                for op in path.values():
                    if isinstance(op, dict):
                        op.get("responses", {}).pop("422", None)
                        if route.startswith("/v1"):
                            _declare_security(op)
            schema.setdefault("components", {}).setdefault("securitySchemes", {})["basicAuth"] = {
                "type": "http", "scheme": "basic",
                "description": "a SCRAM user and its password (secure clusters only; over HTTPS)"}
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
            app.openapi_schema = _exact_bounds(schema)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _declare_security(op: dict[str, Any]) -> None:
    """401 and 403 with ``ErrorBody``, and HTTP Basic as the (optional on plaintext) security scheme."""
    responses = op.setdefault("responses", {})
    for code, text in SECURITY_RESPONSES.items():
        responses.setdefault(code, {"description": text, "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}})
    op["security"] = [{"basicAuth": []}, {}]


def _exact_bounds(node: Any) -> Any:
    """FastAPI writes ``minimum``/``maximum`` as floats: 2**63 - 1 becomes 2**63. Put exact integers back."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("minimum", "maximum") and isinstance(value, float) and value.is_integer():
                exact = {float(INT64_MAX): INT64_MAX, float(INT64_MIN): INT64_MIN}
                node[key] = exact.get(value, int(value))
            else:
                _exact_bounds(value)
    elif isinstance(node, list):
        for item in node:
            _exact_bounds(item)
    return node
