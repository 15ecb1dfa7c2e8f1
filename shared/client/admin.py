"""Admin client: topic management through the controllers' REST API.

The REST URL is given, or discovered from any broker's Metadata response (the
active controller advertises it).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import httpx

from shared.client.cluster import ClusterClient
from shared.client.security import authentication_failed, client_security, http_options
from shared.errors import ErrorCode, TidelogError, error_for


class Admin:
    """kafka-python's security settings apply to both sides: the brokers' gRPC (discovering the controller)
    and the controller's REST API (HTTPS verified with ``ssl_cafile``; HTTP Basic with the SASL user;
    the client certificate when given)."""

    def __init__(self, bootstrap_servers: str | Iterable[str] | None = None, *, rest_url: str | None = None,
                 timeout: float = 30.0, client_id: str = "tidelog-admin", security_protocol: str = "PLAINTEXT",
                 sasl_mechanism: str | None = None, sasl_plain_username: str | None = None,
                 sasl_plain_password: str | None = None, ssl_cafile: str | None = None,
                 ssl_certfile: str | None = None, ssl_keyfile: str | None = None) -> None:
        if rest_url is None and bootstrap_servers is None:
            raise ValueError("give bootstrap_servers or rest_url")
        self.bootstrap_servers = bootstrap_servers
        self.client_id = client_id
        self.timeout = timeout
        self.security = client_security(security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password,
                                        ssl_cafile, ssl_certfile, ssl_keyfile)
        self.rest_url = (rest_url or self._discover(wait_s=15.0)).rstrip("/")
        self._http = httpx.Client(timeout=timeout, **http_options(self.security))

    def _discover(self, wait_s: float = 0.0) -> str:
        """The active controller's REST URL, as the brokers advertise it."""
        assert self.bootstrap_servers is not None
        deadline = time.monotonic() + wait_s
        cluster = ClusterClient(self.bootstrap_servers, self.client_id, security=self.security)
        try:
            while True:
                rest = cluster.refresh().controller_rest
                if rest or time.monotonic() >= deadline:
                    break
                time.sleep(0.2)
        finally:
            cluster.close()
        if not rest:
            raise TidelogError("no active controller advertised yet", code=ErrorCode.NOT_CONTROLLER)
        return rest

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        attempts = 0
        while True:
            try:
                resp = self._http.request(method, self.rest_url + path, **kw)
                if resp.status_code != 503 or self.bootstrap_servers is None or attempts >= 20:
                    break
            except httpx.TransportError:
                if self.bootstrap_servers is None or attempts >= 20:
                    raise
            # The controller we knew is gone or standing by without an active one: find the new one.
            attempts += 1
            time.sleep(min(0.1 * attempts, 1.0))
            try:
                self.rest_url = self._discover(wait_s=1.0).rstrip("/")
            except TidelogError:
                continue
        if resp.status_code == 401:  # no or a wrong credential (Kafka's SaslAuthenticationException)
            raise authentication_failed(f"{method} {path}: authentication failed (HTTP 401)")
        if resp.status_code >= 400:
            try:
                body = resp.json()
                code = ErrorCode[body.get("error", "UNKNOWN_SERVER_ERROR")] if body.get("error") in ErrorCode.__members__ else ErrorCode.INVALID_REQUEST
                msg = body.get("message", resp.text)
            except ValueError:
                code, msg = ErrorCode.UNKNOWN_SERVER_ERROR, resp.text
            raise error_for(code, msg)  # the code's own class (TopicExistsError, ...), a TidelogError
        return resp.json() if resp.content else None

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     configs: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._call("POST", "/v1/topics", json={"name": name, "partitions": partitions,
                                                      "replication_factor": replication_factor, "configs": configs or {}})

    def list_topics(self) -> list[str]:
        return self._call("GET", "/v1/topics")["topics"]

    def describe_topic(self, name: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/topics/{name}")

    def delete_topic(self, name: str) -> None:
        self._call("DELETE", f"/v1/topics/{name}")

    def alter_configs(self, name: str, configs: dict[str, Any]) -> dict[str, Any]:
        return self._call("PATCH", f"/v1/topics/{name}/configs", json={"configs": configs})

    def create_partitions(self, name: str, total: int) -> dict[str, Any]:
        return self._call("POST", f"/v1/topics/{name}/partitions", json={"partitions": total})

    def cluster(self) -> dict[str, Any]:
        return self._call("GET", "/v1/cluster")

    # -- client quotas (Kafka's DescribeClientQuotas / AlterClientQuotas) ---------------------------------

    def describe_client_quotas(self, user: str | None = None, client_id: str | None = None,
                               strict: bool = False) -> list[dict[str, Any]]:
        """Entries matching the filter; a component None matches any, ``"<default>"`` the default."""
        params: dict[str, Any] = {"strict": strict}
        if user is not None:
            params["user"] = user
        if client_id is not None:
            params["client_id"] = client_id
        return self._call("GET", "/v1/quotas", params=params)["entries"]

    def alter_client_quotas(self, entries: list[dict[str, Any]], validate_only: bool = False) -> list[dict[str, Any]]:
        """``entries``: ``[{"entity": {"client-id": "app"}, "ops": [{"key": k, "value": v} | {"key": k, "remove": True}]}]``."""
        return self._call("POST", "/v1/quotas/alter", json={"entries": entries, "validate_only": validate_only})["entries"]

    def effective_client_quotas(self, user: str = "ANONYMOUS", client_id: str = "") -> dict[str, Any]:
        return self._call("GET", "/v1/quotas/effective", params={"user": user, "client_id": client_id})

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
