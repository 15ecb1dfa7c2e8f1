"""The console's door to the cluster's public REST admin API (``/v1/...``), asynchronously.

Tries the REST URLs it was given in turn (any controller answers; standbys forward writes), and turns
an error answer into ``UpstreamError`` carrying the Kafka error name the API gave, so every page can show
it. Never touches etcd or an internal RPC.

On a secure cluster the URLs are HTTPS, verified with the cluster's CA (``verify``), and the console acts as
the user signed in to it: ``as_user(user, password)`` is a view sharing the connection pool that sends that
user's HTTP Basic credential with each request, so the controller's ACLs apply as to the user's own
clients. A 401 answer (wrong password, user deleted) is ``UpstreamError("SASL_AUTHENTICATION_FAILED", ...,
401)``; a 403 carries the Kafka name the API gave (``TOPIC_AUTHORIZATION_FAILED``, ...).
"""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import quote

import httpx


class UpstreamError(Exception):
    """An error answer of the REST API (``error``: its Kafka name, e.g. TOPIC_ALREADY_EXISTS) or no answer."""

    def __init__(self, error: str, message: str, status: int = 502) -> None:
        super().__init__(f"{error}: {message}")
        self.error = error
        self.message = message
        self.status = status


def seg(name: str) -> str:
    """A name as one path segment (nothing in it can reach another route)."""
    return quote(name, safe="")


class RestApi:
    def __init__(self, urls: list[str], timeout: float = 15.0, client_id: str = "tidelog-console",
                 verify: ssl.SSLContext | bool = True) -> None:
        if not urls:
            raise ValueError("no REST URL")
        self.urls = [u.rstrip("/") for u in urls]
        self._http = httpx.AsyncClient(timeout=timeout, headers={"x-client-id": client_id}, verify=verify)
        self._auth: tuple[str, str] | None = None
        self._owner = True
        self.seen: dict[str, Any] = {}  # the last /v1/cluster answer's brokers, whoever asked (shared by views)
        self.revoked = False  # a user's view whose session ended: every call is refused

    def as_user(self, user: str, password: str) -> RestApi:
        """The same API (and connection pool) called as ``user``: HTTP Basic on every request."""
        view = object.__new__(RestApi)
        view.urls, view._http, view._auth, view._owner, view.revoked = self.urls, self._http, (user, password), False, False
        view.seen = self.seen
        return view

    @property
    def user(self) -> str | None:
        return None if self._auth is None else self._auth[0]

    async def close(self) -> None:
        if self._owner:
            await self._http.aclose()

    async def call(self, method: str, path: str, **kw: Any) -> Any:
        if self.revoked:
            raise UpstreamError("SASL_AUTHENTICATION_FAILED", "the session ended: sign in again", 401)
        if self._auth is not None:
            kw["auth"] = self._auth
        last: Exception | None = None
        for i, url in enumerate(list(self.urls)):
            try:
                resp = await self._http.request(method, url + path, **kw)
            except httpx.HTTPError as exc:
                last = exc
                continue
            if resp.status_code == 503 and i + 1 < len(self.urls):
                continue  # a controller without an active one in sight: ask the next
            if i:  # remember the one that answered first next time
                self.urls.insert(0, self.urls.pop(i))
            if resp.status_code >= 400:
                try:
                    body = resp.json()
                    error, message = str(body.get("error", "UNKNOWN_SERVER_ERROR")), str(body.get("message", ""))
                    if "detail" in body and "error" not in body:
                        error, message = "UNKNOWN_SERVER_ERROR", str(body["detail"])
                except (ValueError, AttributeError):
                    error, message = "UNKNOWN_SERVER_ERROR", resp.text[:500]
                if resp.status_code == 401 and error == "UNKNOWN_SERVER_ERROR":
                    error = "SASL_AUTHENTICATION_FAILED"
                raise UpstreamError(error, message, resp.status_code)
            return resp.json() if resp.content else None
        raise UpstreamError("NETWORK_EXCEPTION", f"no REST API answered ({type(last).__name__}: {last})", 502)

    # -- the routes the console uses ------------------------------------------------------------------------

    async def cluster(self) -> dict[str, Any]:
        found = await self.call("GET", "/v1/cluster")
        self.seen["brokers"] = found.get("brokers", [])
        return found

    async def topics(self) -> list[str]:
        return (await self.call("GET", "/v1/topics"))["topics"]

    async def topic(self, name: str) -> dict[str, Any]:
        return await self.call("GET", f"/v1/topics/{seg(name)}")

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, Any]) -> dict[str, Any]:
        return await self.call("POST", "/v1/topics", json={"name": name, "partitions": partitions,
                                                           "replication_factor": replication_factor, "configs": configs})

    async def delete_topic(self, name: str) -> None:
        await self.call("DELETE", f"/v1/topics/{seg(name)}")

    async def alter_configs(self, name: str, configs: dict[str, Any]) -> dict[str, Any]:
        return await self.call("PATCH", f"/v1/topics/{seg(name)}/configs", json={"configs": configs})

    async def add_partitions(self, name: str, total: int) -> dict[str, Any]:
        return await self.call("POST", f"/v1/topics/{seg(name)}/partitions", json={"partitions": total})

    async def groups(self) -> list[dict[str, Any]]:
        return (await self.call("GET", "/v1/groups"))["groups"]

    async def group(self, group_id: str) -> dict[str, Any]:
        return await self.call("GET", f"/v1/groups/{seg(group_id)}")

    async def delete_group(self, group_id: str) -> None:
        await self.call("DELETE", f"/v1/groups/{seg(group_id)}")

    async def reset_offsets(self, group_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.call("POST", f"/v1/groups/{seg(group_id)}/offsets/reset", json=body)

    async def quotas(self) -> list[dict[str, Any]]:
        return (await self.call("GET", "/v1/quotas"))["entries"]

    async def alter_quotas(self, entries: list[dict[str, Any]], validate_only: bool = False) -> list[dict[str, Any]]:
        body = {"entries": entries, "validate_only": validate_only}
        return (await self.call("POST", "/v1/quotas/alter", json=body))["entries"]

    async def effective_quotas(self, user: str, client_id: str) -> dict[str, Any]:
        return await self.call("GET", "/v1/quotas/effective", params={"user": user, "client_id": client_id})

    async def cleaner(self) -> list[dict[str, Any]]:
        return await self.call("GET", "/v1/cleaner")

    async def transactions(self, states: list[str]) -> list[dict[str, Any]]:
        params = [("state", s) for s in states]
        return (await self.call("GET", "/v1/transactions", params=params))["transactions"]

    async def transaction(self, transactional_id: str) -> dict[str, Any]:
        return await self.call("GET", f"/v1/transactions/{seg(transactional_id)}")

    async def hanging_transactions(self, topic: str, max_transaction_timeout_ms: int | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"topic": topic}
        if max_transaction_timeout_ms is not None:
            params["max_transaction_timeout_ms"] = max_transaction_timeout_ms
        return await self.call("GET", "/v1/transactions/hanging", params=params)

    async def abort_transaction(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self.call("POST", "/v1/transactions/abort", json=body)

    # -- ACLs and SCRAM users (issue 23) ----------------------------------------------------------------------

    async def acls(self, params: dict[str, str] | None = None) -> list[dict[str, Any]]:
        return (await self.call("GET", "/v1/acls", params=params or {}))["acls"]

    async def create_acls(self, bindings: list[dict[str, Any]]) -> dict[str, Any]:
        return await self.call("POST", "/v1/acls", json={"acls": bindings})

    async def delete_acls(self, params: dict[str, str]) -> list[dict[str, Any]]:
        return (await self.call("DELETE", "/v1/acls", params=params))["acls"]

    async def users(self) -> list[dict[str, Any]]:
        return (await self.call("GET", "/v1/users"))["users"]
