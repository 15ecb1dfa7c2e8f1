"""The Kafka listener's ``max.connections.per.ip`` (issue 23, item 6): real sockets against the real
listener (its connection handling only: no request is sent, so its request layer is a stand-in)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.broker.kafka.listener import UNLIMITED, KafkaListener, parse_ip_overrides


class _NoApis:
    pipeline: Any = None

    async def close(self) -> None:
        return None


async def _open(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def _closed_by_peer(reader: asyncio.StreamReader, timeout: float = 0.5) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), timeout) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def test_parse_overrides() -> None:
    assert parse_ip_overrides("") == {}
    assert parse_ip_overrides("127.0.0.1:5, host-a:0 ,[::1]:7") == {"127.0.0.1": 5, "host-a": 0, "::1": 7}
    with pytest.raises(ValueError):
        parse_ip_overrides("127.0.0.1")
    with pytest.raises(ValueError):
        parse_ip_overrides("h:x")


@pytest.mark.parametrize("limit,overrides,allowed", [(2, None, 2), (2, {"127.0.0.1": 4}, 4), (5, {"10.0.0.1": 1}, 5)])
def test_connections_over_the_per_ip_limit_are_closed_at_once(limit: int, overrides: dict[str, int] | None,
                                                               allowed: int) -> None:
    async def run() -> None:
        listener = KafkaListener(_NoApis(), max_connections_per_ip=limit,  # type: ignore[arg-type]
                                 max_connections_per_ip_overrides=overrides)
        port = await listener.start("127.0.0.1", 0)
        try:
            kept = [await _open(port) for _ in range(allowed)]
            for reader, _ in kept:
                assert not await _closed_by_peer(reader, 0.2)
            reader, writer = await _open(port)
            assert await _closed_by_peer(reader), "a connection over max.connections.per.ip was served"
            writer.close()
            assert listener.rejected_connections == 1 and listener.connection_count == allowed
            kept.pop()[1].close()  # one closes: a new one is admitted
            await asyncio.sleep(0.2)
            reader, writer = await _open(port)
            assert not await _closed_by_peer(reader, 0.3)
            writer.close()
            for _, w in kept:
                w.close()
        finally:
            await listener.stop()

    asyncio.run(run())


def test_unlimited_by_default_as_kafka() -> None:
    async def run() -> None:
        listener = KafkaListener(_NoApis())  # type: ignore[arg-type]
        assert listener.max_connections_per_ip == UNLIMITED
        port = await listener.start("127.0.0.1", 0)
        try:
            conns = [await _open(port) for _ in range(50)]
            await asyncio.sleep(0.2)
            assert listener.connection_count == 50 and listener.rejected_connections == 0
            for _, w in conns:
                w.close()
        finally:
            await listener.stop()

    asyncio.run(run())


def test_a_refused_host_is_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> None:
        listener = KafkaListener(_NoApis(), max_connections_per_ip=0)  # type: ignore[arg-type]
        port = await listener.start("127.0.0.1", 0)
        try:
            for _ in range(5):
                reader, writer = await _open(port)
                assert await _closed_by_peer(reader)
                writer.close()
        finally:
            await listener.stop()
        assert listener.rejected_connections == 5

    with caplog.at_level("WARNING"):
        asyncio.run(run())
    assert sum("max.connections.per.ip" in r.getMessage() for r in caplog.records) == 1
