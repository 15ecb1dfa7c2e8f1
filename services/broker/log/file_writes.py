"""Appending to log files in writes of at most ``WRITE_PIECE_BYTES``, cut from where each write starts.

Measured on the 2-core CI machine (a 6.18 kernel, ext4, a VM with virtio-balloon free page reporting):
at some times every write size costs ~0.2-0.25 µs of kernel time per KiB appended; at others, writes of
512 KiB or more cost 1.7-4.0 µs per KiB (256 KiB: ~1.6) while 128 KiB pieces still cost 0.2-0.38
(400-800 MiB files, 6 of 6 interleaved pairs: 4 MiB writes 1.74-2.22, 128 KiB pieces 0.23-0.27). Writing
7 GiB into one file (``write`` calls of 1,036,419 bytes, a fetch-sized request, or pieces of them), per
512 MiB: whole writes turned slow (2.2-3.5 µs) after 2.5-4.5 GiB in 4 of 4 runs; 128 KiB pieces stayed at
0.24-0.38 µs to the end (5 or 7 GiB) in 4 of 4; pieces cut at multiples of their size in the file (16,
32, 64 or 128 KiB: whole page-cache folios) turned slow too, after 5-7 GiB, in 5 of 7 runs (the other
two stopped at 5 GiB). Why unaligned pieces escape it was not worked out (the first guess, large folios
taking the free blocks the VM hands back to its host, does not explain the aligned small pieces); that
they do was measured.

The broker met it under sustained produce: Spark writing 1M records of 1 KiB at a time into a topic
(``tidelog-jvm`` writer, 1 MiB batches), the broker's CPU per write went from 1.1-1.6 s to 2.5-4.3 s on
7 of 24 writes with whole-request writes, all of it kernel time, and on none of 18 with 128 KiB pieces
(1.14-1.63 s), interleaved on two one-broker clusters; in twelve more writes with pieces, six into one
topic twice, one rose to 2.22 s (1.5 s of it kernel time): pieces make it rarer and smaller, not impossible. The pieces cost one more system call per 128 KiB:
~0.04-0.06 µs of kernel time per KiB when no write is slow (the 7 GiB runs), ~0.1 µs of broker CPU per
1 KiB record in interleaved produce benchmarks, within their noise.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

#: the most one ``write`` appends (see the module's docstring for why not the whole request at once)
WRITE_PIECE_BYTES = 128 * 1024
#: the most buffers one ``writev`` takes (the kernel's IOV_MAX: more is EINVAL). A leader's append has two
#: per batch, and a produce request may hold many small uncompressed batches for one partition.
IOV_MAX = 1024


def write_fully(fd: int, parts: Sequence[bytes | bytearray | memoryview], total: int | None = None) -> int:
    """Write ``parts`` in order at ``fd``'s position, in ``writev`` calls of at most ``WRITE_PIECE_BYTES``
    and ``IOV_MAX`` buffers, finishing short writes. Returns the bytes written (``total``, their sum, if
    given)."""
    if total is None:
        total = sum(len(p) for p in parts)
    if total <= WRITE_PIECE_BYTES and len(parts) <= IOV_MAX:
        _writev_fully(fd, parts, total)
        return total
    piece: list[memoryview] = []
    size = 0
    for part in parts:
        view = memoryview(part).cast("B")
        while view:
            take = min(len(view), WRITE_PIECE_BYTES - size)
            piece.append(view[:take])
            size += take
            view = view[take:]
            if size == WRITE_PIECE_BYTES or len(piece) == IOV_MAX:
                _writev_fully(fd, piece, size)
                piece, size = [], 0
    if piece:
        _writev_fully(fd, piece, size)
    return total


def _writev_fully(fd: int, parts: Sequence[bytes | bytearray | memoryview], size: int) -> None:
    written = os.writev(fd, parts)
    if written < size:  # a short write (a full disk raises instead): finish it
        rest = memoryview(b"".join(bytes(p) for p in parts))[written:]
        while rest:
            rest = rest[os.write(fd, rest):]
