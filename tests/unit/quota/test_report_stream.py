"""Component test: a broker's QuotaReporter against the quota servicer on an in-process gRPC server (port 0)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import grpc
import pytest

from services.broker.quota_client import QuotaReporter
from services.broker.quota_state import QuotaAccounting
from services.quota.decider import QuotaDecider
from services.quota.main import QuotaServicer
from shared.proto import quota_pb2_grpc as qpb_grpc
from shared.quota.entities import ANONYMOUS, PRODUCER_BYTE_RATE, QuotaEntity, QuotaType


class _Instance:
    """What the servicer needs of the quota service."""

    def __init__(self) -> None:
        self.decider = QuotaDecider()
        self.decider.set_configs({QuotaEntity(None, "app"): {PRODUCER_BYTE_RATE: 1000.0}})
        self.active = True
        self.instance = "q1"


async def _until(predicate: object, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def _reporting(instance: _Instance) -> AsyncIterator[tuple[QuotaReporter, QuotaAccounting]]:
    """A quota servicer for ``instance`` on port 0 and a running reporter (20 ms interval) streaming to it."""
    server = grpc.aio.server()
    qpb_grpc.add_QuotaServiceServicer_to_server(QuotaServicer(instance), server)  # type: ignore[arg-type]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    accounting = QuotaAccounting(report_interval_s=0.02, expiry_s=0.2)

    async def find_active() -> str | None:
        return f"127.0.0.1:{port}"

    reporter = QuotaReporter(find_active, accounting, broker_id=7, interval_s=0.02)
    task = asyncio.ensure_future(reporter.run())
    try:
        yield reporter, accounting
    finally:
        task.cancel()
        await server.stop(None)


def test_usage_goes_out_decisions_come_back_and_a_standby_is_left_failing_open(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        instance = _Instance()
        async with _reporting(instance) as (reporter, accounting):
            accounting.record(QuotaType.PRODUCE, ANONYMOUS, "app", 50_000.0)  # 50 s worth of a 1000 B/s quota
            await _until(lambda: accounting.throttle_s((0,), ANONYMOUS, "app", asyncio.get_running_loop().time()) > 1)
            assert reporter.connected
            instance.active = False  # now a standby: it refuses the stream
            failures = reporter.failures
            await _until(lambda: reporter.failures >= failures + 3, timeout=10)  # several reconnection attempts
            # The decisions expire (fail open) and the outage is logged once.
            assert accounting.throttle_s((0,), ANONYMOUS, "app", asyncio.get_running_loop().time()) == 0.0

    with caplog.at_level(logging.WARNING, logger="services.broker.quota_client"):
        asyncio.run(scenario())
    assert [r.getMessage() for r in caplog.records].count(
        "quota service unreachable: serving without its decisions once they expire (fail open); reconnecting") == 1


def test_an_idle_broker_reports_once_a_second_and_usage_goes_out_at_the_interval(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("services.broker.quota_client.IDLE_REPORT_S", 0.3)

    async def scenario() -> None:
        instance = _Instance()
        instance.decider.set_configs({})  # no quota entry anywhere: nothing can be throttled
        async with _reporting(instance) as (reporter, accounting):
            await _until(lambda: reporter.connected)  # the first report goes at once
            first = reporter._sequence
            await asyncio.sleep(1.0)  # 50 intervals, idle: about 3 reports
            idle = reporter._sequence - first
            assert 1 <= idle <= 4, idle  # not the 50 of a busy broker
            for _ in range(10):  # usage: a report at every interval again
                accounting.record(QuotaType.PRODUCE, ANONYMOUS, "app", 10.0)
                await asyncio.sleep(0.02)
            assert reporter._sequence - first - idle >= 5

    asyncio.run(scenario())
