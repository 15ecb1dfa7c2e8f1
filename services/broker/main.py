"""The broker process: registers under its lease, hosts partitions, serves produce/fetch over gRPC."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

import grpc
from pydantic import Field

from services.broker.metadata_cache import ClusterView, MetadataCache
from services.broker.replica_manager import ReplicaManager
from services.broker.server import BrokerServicer
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.service import Service, run
from shared.settings import ServiceSettings

log = logging.getLogger(__name__)


class BrokerSettings(ServiceSettings):
    rack: str | None = Field(None, description="broker.rack for rack-aware replica assignment")
    housekeeping_interval_ms: int = Field(
        1000, ge=10, le=600_000, description="how often retention, flush.ms and HW checkpoints run"
    )


class Broker(Service[BrokerSettings]):
    role = "broker"

    def __init__(self, settings: BrokerSettings) -> None:
        super().__init__(settings)
        # A new incarnation per process start, so a restarted broker is told apart from its past self.
        self.incarnation = f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"
        self.replicas = ReplicaManager(settings.id, settings.data_dir)
        self.metadata = MetadataCache(self.store, self._on_metadata)
        self._tasks: list[asyncio.Task[Any]] = []

    def add_servicers(self, server: grpc.aio.Server) -> None:
        pb_grpc.add_BrokerServicer_to_server(BrokerServicer(self.replicas, self.settings.id), server)

    async def _on_metadata(self, view: ClusterView) -> None:
        await self.replicas.apply_metadata(view)

    async def start(self) -> None:
        s = self.settings
        await self.store.register(
            self.store.keys.broker(s.id),
            {"id": s.id, "address": self.address, "rack": s.rack, "incarnation": self.incarnation},
            s.session_timeout_s,
        )
        await self.metadata.start()
        await asyncio.wait_for(self.metadata.ready.wait(), 30)
        self._tasks.append(asyncio.create_task(self._housekeeping()))

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(self.settings.housekeeping_interval_ms / 1000)
            self.replicas.housekeeping()

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self.replicas.close()

    def ready_info(self) -> dict[str, Any]:
        return {**super().ready_info(), "rack": self.settings.rack}


def main() -> None:
    run(Broker, BrokerSettings)
