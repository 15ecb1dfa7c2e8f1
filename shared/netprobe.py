"""Plain TCP reachability probes.

gRPC core has open bugs where a client aborts the whole process when a TCP
connect fails synchronously (grpc/grpc#40390, #39461) — which is what
connecting to a closed port on loopback does. Before (re)dialling a peer
that may be down, callers check with a plain socket first so gRPC only ever
dials a port that is listening.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def tcp_reachable(address: str, timeout: float = 0.25) -> bool:
    try:
        with socket.create_connection(_split(address), timeout=timeout):
            return True
    except OSError:
        return False


async def tcp_reachable_async(address: str, timeout: float = 0.25) -> bool:
    host, port = _split(address)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return True


async def tcp_probe_async(address: str, timeout: float = 0.25) -> str:
    """``"up"``, ``"refused"`` (nothing listens: the process is gone) or ``"unknown"`` (timeout, other errors).

    A paused (SIGSTOPped) process still accepts connections: only a crashed one refuses them.
    """
    host, port = _split(address)
    try:
        async with asyncio.timeout(timeout):  # not wait_for: Python 3.11's may swallow a cancel (see election)
            _, writer = await asyncio.open_connection(host, port)
    except ConnectionRefusedError:
        return "refused"
    except (OSError, TimeoutError):
        return "unknown"
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return "up"
