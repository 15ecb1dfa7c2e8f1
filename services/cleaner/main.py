"""The cleaner process: a stateless compaction worker registered in etcd.

It finds the brokers under ``/brokers/`` in etcd and asks them for compaction jobs
(``services.cleaner.worker``); any number of workers can run side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from prometheus_client import REGISTRY
from pydantic import Field

from services.cleaner.metrics import WorkerCollector
from services.cleaner.worker import WorkerLoop
from shared.service import RegisteredService, run
from shared.settings import ServiceSettings

log = logging.getLogger(__name__)


class CleanerSettings(ServiceSettings):
    log_cleaner_backoff_ms: int = Field(15_000, ge=10, le=3_600_000,
                                        description="log.cleaner.backoff.ms: idle time after a round found no job")
    log_cleaner_io_max_bytes_per_second: float | None = Field(
        None, gt=0, description="log.cleaner.io.max.bytes.per.second: this worker's read+write rate (none: unlimited)")


class Cleaner(RegisteredService[CleanerSettings]):
    role = "cleaner"

    def __init__(self, settings: CleanerSettings) -> None:
        super().__init__(settings)
        self._task: asyncio.Task[Any] | None = None
        self.loop: WorkerLoop | None = None

    async def start(self) -> None:
        await super().start()
        self.loop = WorkerLoop(f"cleaner-{self.instance}", self.settings.log_cleaner_io_max_bytes_per_second)
        if self.settings.metrics_port >= 0:
            REGISTRY.register(WorkerCollector(lambda: self.loop))
        self._task = asyncio.create_task(self._run())

    async def _broker_addresses(self) -> list[str]:
        snap = await self.store.get_prefix(self.store.keys.brokers_prefix())
        return sorted(v["address"] for v, _, _ in snap.values() if isinstance(v, dict) and v.get("address"))

    async def _run(self) -> None:
        assert self.loop is not None
        while True:
            try:
                ran = await self.loop.once(await self._broker_addresses())
            except Exception as exc:  # etcd hiccups and the like: try again after a pause
                log.warning("cleaner round failed", extra={"error": str(exc)})
                ran = False
            if not ran:
                await asyncio.sleep(self.settings.log_cleaner_backoff_ms / 1000)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.loop is not None:
            await self.loop.close()


def main() -> None:
    run(Cleaner, CleanerSettings)
