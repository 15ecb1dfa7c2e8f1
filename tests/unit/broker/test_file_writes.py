"""``write_fully``: whatever the pieces (bytes, bytearray, memoryview, empty ones) and however they straddle
``WRITE_PIECE_BYTES``, the file holds exactly their bytes in order, written in calls of at most that size."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from services.broker.log import file_writes
from services.broker.log.file_writes import IOV_MAX, WRITE_PIECE_BYTES, write_fully
from services.broker.log.segment import LogSegment


@pytest.mark.parametrize("sizes", [
    [0], [1], [WRITE_PIECE_BYTES], [WRITE_PIECE_BYTES + 1], [1 << 20], [3, WRITE_PIECE_BYTES - 3, 0, 7],
    [WRITE_PIECE_BYTES - 1, 2, WRITE_PIECE_BYTES * 3 + 5, 0, 1, 1 << 20],
])
def test_the_file_holds_the_pieces_in_order(tmp_path: Path, sizes: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(sum(sizes))
    raw = [rng.randbytes(n) for n in sizes]
    pieces: list[bytes | bytearray | memoryview] = [
        p if i % 3 == 0 else bytearray(p) if i % 3 == 1 else memoryview(b"xx" + p + b"yy")[2:2 + len(p)]
        for i, p in enumerate(raw)]
    calls: list[int] = []
    writev = os.writev

    def counting(fd: int, bufs: list[bytes | memoryview]) -> int:
        calls.append(sum(len(b) for b in bufs))
        return writev(fd, bufs)

    monkeypatch.setattr(file_writes.os, "writev", counting)
    path = tmp_path / "f.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, b"head")
        assert write_fully(fd, pieces) == sum(sizes)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"head" + b"".join(raw)
    assert all(n <= WRITE_PIECE_BYTES for n in calls)
    assert sum(calls) == sum(sizes)


def test_more_parts_than_one_writev_takes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A produce request with many small uncompressed batches for one partition gives the segment two parts
    per batch; more than IOV_MAX of them in one ``writev`` is EINVAL (a failed produce before this)."""
    calls: list[int] = []
    writev = os.writev

    def counting(fd: int, bufs: list[bytes | memoryview]) -> int:
        calls.append(len(bufs))
        return writev(fd, bufs)

    monkeypatch.setattr(file_writes.os, "writev", counting)
    parts = [bytes([i % 251]) * (1 + i % 40) for i in range(3 * IOV_MAX + 7)]
    seg = LogSegment(str(tmp_path), 0, 4096, 0)
    seg.append(parts, [(0, 0, len(parts) - 1, 1)])
    assert (tmp_path / "00000000000000000000.log").read_bytes() == b"".join(parts)
    assert seg.size == sum(map(len, parts))
    assert max(calls) <= IOV_MAX and len(calls) >= 4
