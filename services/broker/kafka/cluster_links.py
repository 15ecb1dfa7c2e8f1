"""The broker's links to the rest of the cluster for the Kafka door: the active controller's REST API
(topic administration, auto-creation) and the group coordinators' gRPC service (group requests are
forwarded to the coordinator owning the group's ``__consumer_offsets`` partition).

Kafka clients talk only to brokers: the controller and the coordinator are Tidelog services of their
own, so a broker forwards what Kafka would answer in its controller or group coordinator. Errors of
the hop come back as Kafka's codes (``NOT_CONTROLLER`` / ``COORDINATOR_NOT_AVAILABLE``: retriable).

The admin calls (``create_topic``, ``delete_topic``, ``add_partitions``, ``alter_topic_configs``,
``describe_quotas``, ``alter_quotas``, ``elect_preferred``) answer a ``RestResult``: the REST error
body's Kafka error name becomes its ``ErrorCode`` here, in one place (``rest_error``).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from services.broker.replica_manager import ReplicaManager
from shared.errors import ErrorCode
from shared.request_context import ON_BEHALF_OF, ON_BEHALF_OF_HEADER
from shared.security import transport

log = logging.getLogger(__name__)
REST_TIMEOUT_S = 30.0
#: How often ``wait_for_view`` looks at the broker's metadata view.
VIEW_POLL_S = 0.02
#: The code of a REST failure whose body names no Kafka error, by HTTP status.
_STATUS_CODES = {400: ErrorCode.INVALID_REQUEST, 404: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                 409: ErrorCode.TOPIC_ALREADY_EXISTS, 503: ErrorCode.NOT_CONTROLLER}


@dataclass(frozen=True)
class RestResult:
    """A REST call's outcome in Kafka's terms: ``error`` NONE with the JSON ``body``, or a code and message."""

    error: ErrorCode
    message: str | None = None
    body: Any = None

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.NONE


def rest_error(status: int, body: Any) -> RestResult:
    """The Kafka error of a REST answer: its body's ``error`` name when it is a Kafka error name, else
    the status's usual code; the body's ``message`` travels along."""
    if 200 <= status < 300:
        return RestResult(ErrorCode.NONE, None, body)
    name = body.get("error") if isinstance(body, dict) else None
    message = body.get("message") if isinstance(body, dict) else None
    code = ErrorCode.__members__.get(name) if isinstance(name, str) else None
    if code is None or code == ErrorCode.NONE:
        code = _STATUS_CODES.get(status, ErrorCode.UNKNOWN_SERVER_ERROR)
    return RestResult(code, str(message) if message else f"controller answered HTTP {status}")


def _rest_tls() -> ssl.SSLContext | bool:
    """How the controller's REST API is reached: on a secure cluster HTTPS verified against the cluster
    CA, presenting this broker's certificate (``shared.security.transport.current()``); else plain HTTP."""
    tls = transport.current()
    if tls is None:
        return True
    ctx = ssl.create_default_context(cafile=tls.cafile)
    if tls.certfile and tls.keyfile:
        ctx.load_cert_chain(tls.certfile, tls.keyfile)
    return ctx


class ClusterLinks:
    def __init__(self, rm: ReplicaManager, store: Any, configs: dict[str, Any]) -> None:
        self.rm = rm
        self.store = store
        self.configs = configs
        self._http = httpx.AsyncClient(timeout=REST_TIMEOUT_S, verify=_rest_tls())
        self._creating: dict[str, asyncio.Task[ErrorCode]] = {}

    async def close(self) -> None:
        for t in self._creating.values():
            t.cancel()
        await self._http.aclose()

    def controller_rest(self) -> str | None:
        c = self.rm.view.controller
        rest = c.get("rest") if c else None
        return str(rest).rstrip("/") if rest else None

    async def rest(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        """``(status, JSON body)`` of a call to the active controller's REST API; status 503 when no
        controller is active or it cannot be reached."""
        base = self.controller_rest()
        if base is None:
            return 503, {"error": "NOT_CONTROLLER", "message": "no active controller"}
        behalf = ON_BEHALF_OF.get()
        if behalf is not None:  # a Kafka client's admin request: the controller authorizes and audits the user
            kw["headers"] = {**kw.get("headers", {}), ON_BEHALF_OF_HEADER: behalf}
        try:
            resp = await self._http.request(method, base + path, **kw)
        except httpx.HTTPError as exc:
            return 503, {"error": "NOT_CONTROLLER", "message": f"controller unreachable: {exc}"}
        try:
            body = resp.json() if resp.content else None
        except ValueError:
            body = None
        return resp.status_code, body

    async def _call(self, method: str, path: str, **kw: Any) -> RestResult:
        status, body = await self.rest(method, path, **kw)
        return rest_error(status, body)

    # -- admin calls (the Kafka admin APIs forward to these) ------------------------------------------

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str]) -> RestResult:
        """``POST /v1/topics``; the body is the created topic (``topic_id``, partitions, configs)."""
        return await self._call("POST", "/v1/topics", json={
            "name": name, "partitions": partitions, "replication_factor": replication_factor, "configs": configs})

    async def delete_topic(self, name: str) -> RestResult:
        return await self._call("DELETE", f"/v1/topics/{name}")

    async def add_partitions(self, name: str, total: int) -> RestResult:
        return await self._call("POST", f"/v1/topics/{name}/partitions", json={"partitions": total})

    async def alter_topic_configs(self, name: str, changes: dict[str, str | None]) -> RestResult:
        """Set (a value) or remove (None) topic config overrides; the body is the topic as changed."""
        return await self._call("PATCH", f"/v1/topics/{name}/configs", json={"configs": changes})

    async def describe_quotas(self) -> RestResult:
        """Every client quota entry: ``[{"entity": {"user": ..., "client-id": ...}, "values": {...}}]``."""
        result = await self._call("GET", "/v1/quotas")
        if result.ok:
            entries = result.body.get("entries") if isinstance(result.body, dict) else None
            return RestResult(ErrorCode.NONE, None, entries if isinstance(entries, list) else [])
        return result

    async def alter_quotas(self, entries: list[dict[str, Any]], validate_only: bool) -> RestResult:
        """``entries``: ``[{"entity": {...}, "ops": [{"key": k, "value": v} | {"key": k, "remove": true}]}]``."""
        return await self._call("POST", "/v1/quotas/alter", json={"entries": entries, "validate_only": validate_only})

    async def elect_preferred(self, topic: str | None, partitions: list[int] | None) -> RestResult:
        """Preferred-leader election of a topic's partitions (all of them with ``partitions`` None), or of
        every partition (``topic`` None); the body's ``elected`` lists the partitions whose leader moved."""
        body: dict[str, Any] = {"all_topic_partitions": True} if topic is None else {"topic": topic}
        if topic is not None and partitions is not None:
            body["partitions"] = partitions
        return await self._call("POST", "/v1/elect-leaders", json=body)

    async def wait_for_view(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until this broker's metadata view satisfies ``done`` (a change made through the controller
        reached it), at most ``timeout_s``; False if it did not."""
        deadline = asyncio.get_running_loop().time() + max(timeout_s, 0.0)
        while not done():
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(VIEW_POLL_S)
        return True

    async def auto_create_topic(self, name: str) -> ErrorCode:
        """Ask the controller to create ``name`` with num.partitions and default.replication.factor; the
        Metadata answer meanwhile (Kafka's): LEADER_NOT_AVAILABLE while it is being created."""
        task = self._creating.get(name)
        if task is None:
            task = self._creating[name] = asyncio.ensure_future(self._create(name))
            task.add_done_callback(lambda _t: self._creating.pop(name, None))
        try:
            return await asyncio.wait_for(asyncio.shield(task), 5.0)
        except TimeoutError:
            return ErrorCode.LEADER_NOT_AVAILABLE

    async def _create(self, name: str) -> ErrorCode:
        brokers = len(self.rm.view.brokers) or 1
        body = {"name": name, "partitions": int(self.configs.get("num.partitions", 1)),
                "replication_factor": min(int(self.configs.get("default.replication.factor", 1)), brokers)}
        status, answer = await self.rest("POST", "/v1/topics", json=body)
        if status in (201, 409):  # created, or someone else created it first
            return ErrorCode.LEADER_NOT_AVAILABLE
        if status == 503:
            return ErrorCode.LEADER_NOT_AVAILABLE  # retriable: the client asks again
        error = (answer or {}).get("error", "") if isinstance(answer, dict) else ""
        log.warning("topic auto-creation refused", extra={"topic": name, "status": status, "error": error})
        if error == "POLICY_VIOLATION":
            return ErrorCode.POLICY_VIOLATION
        return ErrorCode.INVALID_TOPIC_EXCEPTION if status == 400 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
