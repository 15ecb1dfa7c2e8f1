"""The cleaner process. Cleaner worker: stateless log compaction (registration only so far)."""

from __future__ import annotations

from shared.service import RegisteredService, run
from shared.settings import ServiceSettings


class CleanerSettings(ServiceSettings):
    pass


class Cleaner(RegisteredService[CleanerSettings]):
    role = "cleaner"


def main() -> None:
    run(Cleaner, CleanerSettings)
