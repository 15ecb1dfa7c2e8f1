"""The quota process: one active instance (elected in etcd) turns brokers' usage into throttle decisions.

Every instance registers; each tries to create the ``quota-leader`` key on
its own lease, and the one that does serves brokers' ``ReportUsage`` streams
while it keeps the lease alive (standbys refuse with FAILED_PRECONDITION and
take over when the key goes). Quota entries are read from etcd with a watch,
so a change applies to the next report (within ``quota.report.interval.ms``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from prometheus_client import REGISTRY
from pydantic import Field

from services.quota.authz import add_to_server as add_quota_to_server
from services.quota.decider import Decision, QuotaDecider
from services.quota.metrics import QuotaCollector
from shared.metadata.store import Snapshot
from shared.proto import quota_pb2 as qpb
from shared.proto import quota_pb2_grpc as qpb_grpc
from shared.quota.entities import QuotaType, parse_configs
from shared.service import RegisteredService, run
from shared.settings import ServiceSettings

log = logging.getLogger(__name__)


class QuotaSettings(ServiceSettings):
    quota_window_num: int = Field(11, ge=2, le=100, description="quota.window.num: samples in a quota window")
    quota_window_size_seconds: int = Field(1, ge=1, le=60, description="quota.window.size.seconds: one sample's span")


class QuotaServicer(qpb_grpc.QuotaServiceServicer):
    def __init__(self, quota: Quota) -> None:
        self.quota = quota
        # (type, user, client id, broker) -> [total reported, last throttle ms, quota, rate]
        self.totals: dict[tuple[int, str, str, int], list[float]] = {}

    def _count(self, broker: int, usage: list[tuple[QuotaType, str, str, float]], decisions: list[Decision]) -> None:
        for qtype, user, client_id, amount in usage:
            self.totals.setdefault((qtype, user, client_id, broker), [0.0, 0, 0.0, 0.0])[0] += amount
        for d in decisions:
            entry = self.totals.setdefault((d.quota_type, d.user, d.client_id, broker), [0.0, 0, 0.0, 0.0])
            entry[1:] = [d.throttle_time_ms, d.quota, d.rate]

    async def DescribeUsage(self, request: qpb.DescribeUsageRequest, context: Any) -> qpb.DescribeUsageResponse:
        resp = qpb.DescribeUsageResponse(active=self.quota.active, instance=self.quota.instance)
        for (qtype, user, client_id, broker), (total, throttle, quota, rate) in sorted(self.totals.items()):
            if not request.client_id or request.client_id == client_id:
                resp.totals.add(quota_type=qtype, user=user, client_id=client_id, broker_id=broker, total=total,
                                throttle_time_ms=int(throttle), quota=quota, rate=rate)
        return resp

    async def ReportUsage(self, request_iterator: AsyncIterator[qpb.UsageReport],  # type: ignore[override]
                          context: Any) -> AsyncIterator[qpb.ThrottleDecisions]:
        decider = self.quota.decider
        async for report in request_iterator:
            if not self.quota.active:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "not the active quota instance")
            usage = [(QuotaType(u.quota_type), u.user, u.client_id, u.amount) for u in report.usage
                     if u.quota_type in QuotaType._value2member_map_]
            resp = qpb.ThrottleDecisions(sequence=report.sequence, instance=self.quota.instance)
            decisions = decider.report(report.broker_id, time.monotonic() * 1000, usage)
            self._count(report.broker_id, usage, decisions)
            for d in decisions:
                resp.decisions.add(quota_type=d.quota_type, user=d.user, client_id=d.client_id,
                                   throttle_time_ms=d.throttle_time_ms, credit=d.credit, quota=d.quota, rate=d.rate)
            yield resp


class Quota(RegisteredService[QuotaSettings]):
    role = "quota"

    def __init__(self, settings: QuotaSettings) -> None:
        super().__init__(settings)
        self.decider = QuotaDecider(settings.quota_window_num, settings.quota_window_size_seconds * 1000)
        self.active = False
        self._tasks: list[asyncio.Task[Any]] = []

    def add_servicers(self, server: grpc.aio.Server) -> None:
        servicer = QuotaServicer(self)
        if self.settings.metrics_port >= 0:
            REGISTRY.register(QuotaCollector(lambda: servicer.totals, lambda: self.active))
        add_quota_to_server(servicer, server, security_of=lambda: self.security)  # rules: services/quota/authz.py

    async def start(self) -> None:
        await super().start()
        self.store.watch_prefix(self.store.keys.quotas_prefix(), self._on_configs, name="quotas")
        self._tasks.append(asyncio.create_task(self._campaign()))

    def _on_configs(self, snapshot: Snapshot) -> None:
        configs = parse_configs(self.store.keys.quotas_prefix(), snapshot)
        self.decider.set_configs(configs)
        log.info("quota entries loaded", extra={"entries": len(configs)})

    async def _campaign(self) -> None:
        """Become the active instance when the leader key is free; stay while the lease lives."""
        key = self.store.keys.quota_leader()
        ttl = self.settings.session_timeout_s
        while True:
            lease = None
            try:
                lease = await self.store.lease(ttl)
                created, _ = await self.store.create(key, {"id": self.instance, "address": self.address}, lease=lease)
                if created:
                    self.active = True
                    log.info("active quota instance")
                    while await self.store.refresh(lease):
                        await asyncio.sleep(ttl / 3)
                    log.warning("lost the quota leadership (lease expired)")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("quota election failed", extra={"error": str(exc)})
            finally:
                self.active = False
                if lease is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(lease.revoke(), 2)
            await asyncio.sleep(0.5)

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t


def main() -> None:
    run(Quota, QuotaSettings)
