"""The quota process. Quota service: quota configuration and throttle delays (registration only so far)."""

from __future__ import annotations

from shared.service import RegisteredService, run
from shared.settings import ServiceSettings


class QuotaSettings(ServiceSettings):
    pass


class Quota(RegisteredService[QuotaSettings]):
    role = "quota"


def main() -> None:
    run(Quota, QuotaSettings)
