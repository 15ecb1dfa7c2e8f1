"""The broker process: registers under its lease and serves its partitions."""

from __future__ import annotations

import time
import uuid
from typing import Any

from pydantic import Field

from shared.service import Service, run
from shared.settings import ServiceSettings


class BrokerSettings(ServiceSettings):
    rack: str | None = Field(None, description="broker.rack for rack-aware replica assignment")


class Broker(Service[BrokerSettings]):
    role = "broker"

    def __init__(self, settings: BrokerSettings) -> None:
        super().__init__(settings)
        # A new incarnation per process start, so a restarted broker is told apart from its past self.
        self.incarnation = f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"

    async def start(self) -> None:
        s = self.settings
        await self.store.register(
            self.store.keys.broker(s.id),
            {"id": s.id, "address": self.address, "rack": s.rack, "incarnation": self.incarnation},
            s.session_timeout_s,
        )

    def ready_info(self) -> dict[str, Any]:
        return {**super().ready_info(), "rack": self.settings.rack}


def main() -> None:
    run(Broker, BrokerSettings)
