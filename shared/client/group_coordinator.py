"""Client side of the GroupCoordinator service: find the coordinator of a group (any broker
answers FindCoordinator) and call it, finding it again after NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE or a transport failure."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from shared.client.cluster import ClusterClient
from shared.errors import ErrorCode, TidelogError
from shared.proto import coordinator_pb2_grpc as cpb_grpc
from shared.proto import tidelog_pb2 as pb

T = TypeVar("T")
REDISCOVER = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                        ErrorCode.COORDINATOR_NOT_AVAILABLE})


class GroupCoordinatorClient:
    def __init__(self, cluster: ClusterClient, group_id: str, timeout_s: float = 30.0) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._address: str | None = None
        self._channel: grpc.Channel | None = None
        self._stub: cpb_grpc.GroupCoordinatorStub | None = None

    def find(self) -> str:
        """Ask brokers which coordinator serves the group."""
        snap = self.cluster.snapshot if self.cluster.snapshot.brokers else self.cluster.refresh()
        last = "no broker answered"
        for addr in list(snap.brokers.values()) + self.cluster.bootstrap:
            stub = self.cluster.reachable_stub(addr)
            if stub is None:
                continue
            try:
                resp = stub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=[self.group_id]), timeout=5)
            except grpc.RpcError as exc:
                last = str(exc.code())
                self.cluster.check_authentication(addr)
                continue
            c = resp.coordinators[0]
            if c.error_code == 0 and c.address:
                return c.address
            last = f"{ErrorCode(c.error_code).name}: {c.error_message}"
        raise TidelogError(f"no coordinator for group {self.group_id!r}: {last}", code=ErrorCode.COORDINATOR_NOT_AVAILABLE)

    def stub(self) -> cpb_grpc.GroupCoordinatorStub:
        """The stub of the group's coordinator (found first if need be)."""
        return self._current()

    def _current(self) -> cpb_grpc.GroupCoordinatorStub:
        with self._lock:
            if self._stub is None:
                self._address = self.find()
                self._channel = self.cluster.channel(self._address)
                self._stub = cpb_grpc.GroupCoordinatorStub(self._channel)
            return self._stub

    def reset(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel = self._stub = self._address = None

    def call(self, method: str, request: Any, deadline_s: float | None = None,
             error_of: Callable[[Any], int] = lambda r: r.error_code) -> Any:
        """Call ``method``; retry on the coordinator-moved errors until ``deadline_s`` (default: the request timeout)."""
        deadline = time.monotonic() + (self.timeout_s if deadline_s is None else deadline_s)
        backoff = 0.05
        while True:
            err: str
            try:
                resp = getattr(self._current(), method)(request, timeout=min(10.0, self.timeout_s))
                code = error_of(resp)
                if code not in REDISCOVER:
                    return resp
                err = ErrorCode(code).name
            except grpc.RpcError as exc:
                err = str(exc.code())
            except TidelogError as exc:
                err = str(exc)
            except ValueError as exc:  # the channel was closed under this call by another thread's reset()
                err = str(exc)
            self.reset()
            if time.monotonic() + backoff > deadline:
                raise TidelogError(f"{method} for group {self.group_id!r} failed: {err}", code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
            time.sleep(backoff)
            backoff = min(backoff * 2, 0.5)

    def close(self) -> None:
        self.reset()
