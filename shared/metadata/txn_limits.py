"""Splitting large metadata writes into etcd transactions that etcd accepts. Pure.

etcd refuses a transaction with more than ``--max-txn-ops`` (default 128) operations
or compares, and a request over ``--max-request-bytes`` (default 1.5 MiB). A write of
one key per partition (a 10,000-partition topic) is split into chunks under both
limits; the caller keeps a single commit point (e.g. the topic record written last)
so readers never see half of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from shared.metadata.store import dumps

ETCD_MAX_TXN_OPS = 128
ETCD_MAX_REQUEST_BYTES = 1536 * 1024
#: Per chunk: room left for a guard compare per op plus the controller's fence.
CHUNK_OPS = 120
#: Per chunk: well under the request limit (keys, values and protobuf framing).
CHUNK_BYTES = 1024 * 1024


def split_writes(
    items: Iterable[tuple[bytes, Any]], max_ops: int = CHUNK_OPS, max_bytes: int = CHUNK_BYTES
) -> list[list[tuple[bytes, Any]]]:
    """``(key, value)`` pairs in order, cut into chunks of at most ``max_ops`` pairs and
    ``max_bytes`` of encoded keys and values. A single pair over ``max_bytes`` is an error."""
    chunks: list[list[tuple[bytes, Any]]] = []
    current: list[tuple[bytes, Any]] = []
    size = 0
    for key, value in items:
        n = len(key) + len(dumps(value))
        if n > max_bytes:
            raise ValueError(f"metadata value for {key.decode(errors='replace')} is {n} bytes, over {max_bytes}")
        if current and (len(current) >= max_ops or size + n > max_bytes):
            chunks.append(current)
            current, size = [], 0
        current.append((key, value))
        size += n
    if current:
        chunks.append(current)
    return chunks


def chunked(seq: Sequence[Any], size: int = CHUNK_OPS) -> list[Sequence[Any]]:
    return [seq[i:i + size] for i in range(0, len(seq), size)]
