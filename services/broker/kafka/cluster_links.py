"""The broker's links to the rest of the cluster for the Kafka door: the active controller's REST API
(topic administration, auto-creation) and the group coordinators' gRPC service (group requests are
forwarded to the coordinator owning the group's ``__consumer_offsets`` partition).

Kafka clients talk only to brokers: the controller and the coordinator are Tidelog services of their
own, so a broker forwards what Kafka would answer in its controller or group coordinator. Errors of
the hop come back as Kafka's codes (``NOT_CONTROLLER`` / ``COORDINATOR_NOT_AVAILABLE``: retriable).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

from services.broker.replica_manager import ReplicaManager
from shared.errors import ErrorCode

log = logging.getLogger(__name__)
REST_TIMEOUT_S = 30.0


class ClusterLinks:
    def __init__(self, rm: ReplicaManager, store: Any, configs: dict[str, Any]) -> None:
        self.rm = rm
        self.store = store
        self.configs = configs
        self._http = httpx.AsyncClient(timeout=REST_TIMEOUT_S)
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
        try:
            resp = await self._http.request(method, base + path, **kw)
        except httpx.HTTPError as exc:
            return 503, {"error": "NOT_CONTROLLER", "message": f"controller unreachable: {exc}"}
        try:
            body = resp.json() if resp.content else None
        except ValueError:
            body = None
        return resp.status_code, body

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
