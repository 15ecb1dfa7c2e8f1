"""The coordinator process. Group coordinator: consumer groups and offsets in __consumer_offsets (registration only so far)."""

from __future__ import annotations

from shared.service import RegisteredService, run
from shared.settings import ServiceSettings


class CoordinatorSettings(ServiceSettings):
    pass


class Coordinator(RegisteredService[CoordinatorSettings]):
    role = "coordinator"


def main() -> None:
    run(Coordinator, CoordinatorSettings)
