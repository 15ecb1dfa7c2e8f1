"""Registering generated gRPC services with hand-written codecs swapped in.

``add_*Servicer_to_server`` (generated) builds a service's method handlers and registers them
twice: as a generic handler and as registered methods. ``RewrittenHandlers`` stands in for the
server while it does, lets ``rewrite`` replace what it needs (a request deserializer that reads
in place, a response serializer that passes hand-serialized bytes through, a wrapper), and
registers the result both ways on the real server (or on ``GuardedServer``, which guards it).
Must not import services.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

Handlers = dict[str, grpc.RpcMethodHandler]


class RewrittenHandlers:
    def __init__(self, server: Any, rewrite: Callable[[Handlers], Handlers]) -> None:
        self.server = server
        self.rewrite = rewrite

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        """Ignored: the generated code registers the same methods below, which are re-registered both ways."""

    def add_registered_method_handlers(self, service: str, handlers: Handlers) -> None:
        handlers = self.rewrite(dict(handlers))
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
        self.server.add_registered_method_handlers(service, handlers)
