"""The broker's stream to the active quota service: usage out every report interval, decisions in.

Fails open: produce and fetch never wait on it. When the quota service cannot
be reached the broker says so once in the log, keeps serving, lets the last
decisions expire (``QuotaAccounting.expiry_s``, two quota windows) and keeps
trying to reconnect to whichever instance is active (read from etcd).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from services.broker.quota_state import QuotaAccounting
from shared.proto import quota_pb2 as qpb
from shared.proto import quota_pb2_grpc as qpb_grpc
from shared.security.transport import aio_channel

log = logging.getLogger(__name__)
RECONNECT_S = 0.5
#: How often an idle broker (no usage, no quota entry, no decision held) reports anyway.
IDLE_REPORT_S = 1.0


class QuotaReporter:
    """``find_active`` returns the active quota instance's address (None when there is none)."""

    def __init__(self, find_active: Callable[[], Awaitable[str | None]], accounting: QuotaAccounting,
                 broker_id: int, interval_s: float) -> None:
        self.find_active = find_active
        self.accounting = accounting
        self.broker_id = broker_id
        self.interval_s = interval_s
        self.connected = False
        self.failures = 0  # connection attempts that ended without (or lost) the quota service
        self._said_unreachable = False
        self._sequence = 0

    async def run(self) -> None:
        while True:
            try:
                address = await asyncio.wait_for(self.find_active(), 2)
                if address:
                    await self._stream(address)
                    reason = "stream ended"
                else:
                    reason = "no active quota instance"
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # gRPC, etcd: all mean "not now"
                reason = str(exc.code()) if isinstance(exc, grpc.aio.AioRpcError) else repr(exc)
            self.connected = False
            self.failures += 1
            if not self._said_unreachable:
                self._said_unreachable = True
                log.warning("quota service unreachable: serving without its decisions once they expire "
                            "(fail open); reconnecting", extra={"reason": reason})
            self.accounting.drain()  # usage nobody will hear about
            await asyncio.sleep(RECONNECT_S)

    async def _reports(self) -> AsyncIterator[qpb.UsageReport]:
        """A report every interval; while there is nothing to say (no usage, no quota entry, no decision
        held) only every ``IDLE_REPORT_S``: an idle broker costs the quota service next to nothing, and the
        stream still shows it alive."""
        loop = asyncio.get_running_loop()
        due, last_sent = loop.time(), float("-inf")  # the first report goes at once: the stream is up
        while True:
            due = max(due + self.interval_s, loop.time())  # a steady cadence, not interval + send time
            await asyncio.sleep(due - loop.time())
            usage = self.accounting.drain()
            if not usage and not self.accounting.has_decisions and loop.time() - last_sent < IDLE_REPORT_S:
                continue
            last_sent = loop.time()
            self._sequence += 1
            report = qpb.UsageReport(broker_id=self.broker_id, sequence=self._sequence)
            for (qtype, user, client_id), amount in usage.items():
                report.usage.add(quota_type=qtype, user=user, client_id=client_id, amount=amount)
            yield report

    async def _stream(self, address: str) -> None:
        async with aio_channel(address) as channel:
            call = qpb_grpc.QuotaServiceStub(channel).ReportUsage(self._reports())
            try:
                async for resp in call:
                    if not self.connected:
                        self.connected = True
                        if self._said_unreachable:
                            log.info("quota service reachable again", extra={"instance": resp.instance})
                        self._said_unreachable = False
                    self.accounting.apply(
                        ((d.quota_type, d.user, d.client_id, d.throttle_time_ms, d.credit) for d in resp.decisions),
                        time.monotonic())
            finally:
                call.cancel()
                with contextlib.suppress(Exception):
                    await call.code()
