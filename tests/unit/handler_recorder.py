"""A stand-in for a gRPC server that records the method handlers a generated ``add_*Servicer_to_server``
registers, so a test can call the wrapped handlers directly (no port, no network)."""

from __future__ import annotations

from typing import Any


class HandlerRecorder:
    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.handlers.update(handlers)
