"""Crash-safe replacement of a log's segments by cleaned ones (Kafka's ``replaceSegments``).

The one way cleaned data enters a log. Each cleaned segment replaces a run of whole,
consecutive old segments and has the base offset of the first of them. Steps, each
durable before the next (the directory is fsynced after every group of renames):

1. the caller wrote every cleaned segment as ``<base>.log.cleaned`` and fsynced it;
2. ``.cleaned`` -> ``.swap``, highest base offset first;
3. every old segment's files -> ``.deleted`` (removed after ``file.delete.delay.ms``);
4. ``.swap`` suffix stripped; indexes are rebuilt from the new ``.log`` files.

The aborted-transaction indexes (``.txnindex``) are not rebuilt but carried over, trimmed: an abort whose
data the cleaner removed is dropped (``live_aborted_entry``), so the cleaned segments index what
recovery, rebuilding from their batches, would index (Kafka's cleaner re-writes the cleaned segment's
index the same way).

Recovery (``complete_interrupted_swaps``, run when a log opens) deletes ``.cleaned`` and
``.deleted`` files and completes every ``.swap``: the old segments whose base offset lies
in the swap segment's offset range are removed and the suffix is stripped. Because step 2
goes from the highest base down, the ``.swap`` files present after a crash are always the
upper part of the new set, and each one covers exactly the old segments it was built from:
the log is then either the old one, the new one, or old segments below new ones — valid
and with every key's latest value in all three cases.

Fault injection: with ``TIDELOG_FAULT_SWAP=<step>`` in the environment, the process kills
itself with SIGKILL right after that step (names from ``swap_steps``), as a ``kill -9``
of a broker mid-swap would; ``TIDELOG_FAULT_SWAP_ONCE=<marker file>`` limits that to the
first time, so a restarted broker can finish. Unit tests pass ``on_step`` instead.

Files only; no networking, no asyncio, no record decoding.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import secrets
import signal
from collections.abc import Callable, Iterable, Iterator, Sequence

from services.broker.log.file_writes import write_fully
from services.broker.log.txn_index import TxnIndex
from services.broker.log.txn_index import encode as encode_txn_index
from services.broker.txn_state import AbortedTxn
from shared.records.header import HEADER_SIZE, LOG_OVERHEAD, BatchHeader

CLEANED = ".cleaned"
SWAP = ".swap"
DELETED = ".deleted"
SEGMENT_FILES = (".log", ".index", ".timeindex", ".txnindex")
FAULT_ENV = "TIDELOG_FAULT_SWAP"
FAULT_ONCE_ENV = "TIDELOG_FAULT_SWAP_ONCE"  # a marker file: fire only if it does not exist yet (then create it)

StepHook = Callable[[str], None]


def env_fault_hook(step: str) -> None:
    """Kill this process (SIGKILL, no cleanup) after ``step`` when ``TIDELOG_FAULT_SWAP`` names it
    (only the first time, when ``TIDELOG_FAULT_SWAP_ONCE`` names a marker file)."""
    if os.environ.get(FAULT_ENV) != step:
        return
    marker = os.environ.get(FAULT_ONCE_ENV)
    if marker:
        try:
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGKILL)


def swap_steps(new_count: int, old_count: int) -> list[str]:
    """The names of the steps of a swap of ``new_count`` cleaned for ``old_count`` old segments."""
    return (
        [f"cleaned:{i}" for i in range(new_count)]
        + [f"swap:{i}" for i in range(new_count)]
        + [f"delete:{i}" for i in range(old_count)]
        + [f"strip:{i}" for i in range(new_count)]
    )


def seg_path(directory: str, base: int, ext: str = ".log", suffix: str = "") -> str:
    return os.path.join(directory, f"{base:020d}{ext}{suffix}")


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_cleaned(directory: str, base: int, data: bytes | bytearray | memoryview) -> str:
    """Step 1: write one cleaned segment as ``<base>.log.cleaned`` and fsync it."""
    path = seg_path(directory, base, ".log", CLEANED)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_fully(fd, [data])
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


class CleanedFiles:
    """Step 1 as a worker's result arrives: each cleaned segment streamed straight into its own
    ``<base>.log.<tag>.cleaned`` file, so the result is never held whole in the broker's memory.

    ``tag`` is drawn per result: a worker whose lease ran out while it streamed never writes into the
    files of the worker that holds the log now. Only names the job allows are written (``allowed``: the
    job's segment base offsets, each at most once, in increasing order), and no more than ``max_bytes``
    in all. Anything else is ``ValueError`` and the caller ``discard``s what was written. ``sync``
    fsyncs every file (step 1's durability, with the ``cleaned:<i>`` fault steps); ``claim`` renames
    them to ``<base>.log.cleaned`` for ``rename_files``. Recovery deletes every ``.cleaned`` file."""

    def __init__(self, directory: str, allowed: Sequence[int], max_bytes: int) -> None:
        self.directory = directory
        self.allowed = frozenset(allowed)
        self.max_bytes = max_bytes
        self.tag = secrets.token_hex(6)
        self.segments: list[tuple[int, tuple[int, ...], int]] = []  # (base, replaces, size)
        self.total = 0
        self._fd: int | None = None

    def add(self, base: int, replaces: Sequence[int], data: bytes) -> None:
        if not self.segments or self.segments[-1][0] != base:
            if base not in self.allowed or (self.segments and base < self.segments[-1][0]):
                raise ValueError(f"cleaned segment {base} is not a segment of the job, in order")
            self._close()
            self._fd = os.open(self._path(base), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            self.segments.append((base, tuple(replaces), 0))
        if self.total + len(data) > self.max_bytes:
            raise ValueError(f"the result is larger than {self.max_bytes} bytes")
        assert self._fd is not None
        write_fully(self._fd, [data])
        b, r, n = self.segments[-1]
        self.segments[-1] = (b, r, n + len(data))
        self.total += len(data)

    def _path(self, base: int) -> str:
        return seg_path(self.directory, base, ".log", f".{self.tag}{CLEANED}" if self.tag else CLEANED)

    def paths(self) -> list[str]:
        return [self._path(b) for b, _, _ in self.segments]

    def entries(self) -> list[tuple[int, tuple[int, ...], str, int]]:
        """``(base offset, replaced bases, path, size)`` of each file, for the check."""
        return [(b, r, self._path(b), n) for b, r, n in self.segments]

    def claim(self) -> None:
        """Rename the (checked, fsynced) files to the ``<base>.log.cleaned`` names ``rename_files`` takes."""
        self._close()
        for b, _, _ in self.segments:
            os.rename(self._path(b), seg_path(self.directory, b, ".log", CLEANED))
        self.tag = ""

    def sync(self, on_step: StepHook = env_fault_hook) -> None:
        """Fsync every file (blocking: run it off the event loop)."""
        self._close()
        for i, path in enumerate(self.paths()):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            on_step(f"cleaned:{i}")

    def discard(self) -> None:
        self._close()
        for path in self.paths():
            _unlink(path)
        self.segments = []

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def rename_files(directory: str, new_bases: Sequence[int], old_bases: Sequence[int],
                 on_step: StepHook = env_fault_hook) -> list[str]:
    """Steps 2-4 on disk. Returns the ``.deleted`` paths for the caller to remove later.

    The old segments' descriptors must already be closed or be safe to keep (POSIX renames
    do not disturb open descriptors). The old segments' aborted-transaction entries that still cover
    data of the cleaned segments (``live_aborted_entry``) go to the new segment holding each abort
    marker's offset, written as ``<base>.txnindex.swap`` before any ``.log.swap`` exists, so a swap that
    recovery completes always has them; entries whose transaction's data the cleaner removed are dropped."""
    _write_merged_txn_indexes(directory, new_bases, old_bases)
    for i, base in enumerate(sorted(new_bases, reverse=True)):
        os.rename(seg_path(directory, base, ".log", CLEANED), seg_path(directory, base, ".log", SWAP))
        fsync_dir(directory)
        on_step(f"swap:{i}")
    deleted: list[str] = []
    for i, base in enumerate(old_bases):
        for ext in SEGMENT_FILES:
            src = seg_path(directory, base, ext)
            if os.path.exists(src):
                os.rename(src, src + DELETED)
                deleted.append(src + DELETED)
        fsync_dir(directory)
        on_step(f"delete:{i}")
    for i, base in enumerate(sorted(new_bases)):
        for ext in (".index", ".timeindex"):  # rebuilt from the new .log by the caller
            _unlink(seg_path(directory, base, ext))
        _strip_txn_index(directory, base)
        os.rename(seg_path(directory, base, ".log", SWAP), seg_path(directory, base, ".log"))
        fsync_dir(directory)
        on_step(f"strip:{i}")
    return deleted


def _write_merged_txn_indexes(directory: str, new_bases: Sequence[int], old_bases: Sequence[int]) -> None:
    entries = []
    for base in old_bases:
        path = seg_path(directory, base, ".txnindex")
        if os.path.exists(path):
            entries.extend(TxnIndex(path).entries)
    if not entries:
        return
    bases = sorted(new_bases)
    batches: dict[int, list[tuple[int, int]]] = {}
    wanted = {e.producer_id for e in entries}
    for base in bases:
        for pid, first, last in _txn_data_batches(seg_path(directory, base, ".log", CLEANED), wanted):
            batches.setdefault(pid, []).append((first, last))
    by_base: dict[int, list[AbortedTxn]] = {}
    for e in sorted(entries, key=lambda e: e.last_offset):
        live = live_aborted_entry(e, batches.get(e.producer_id, ()), bases[0])
        if live is None:
            continue
        i = max(bisect.bisect_right(bases, live.last_offset) - 1, 0)
        by_base.setdefault(bases[i], []).append(live)
    for base, group in by_base.items():
        with open(seg_path(directory, base, ".txnindex", SWAP), "wb") as f:
            f.write(encode_txn_index(group))
            f.flush()
            os.fsync(f.fileno())
    fsync_dir(directory)


def live_aborted_entry(entry: AbortedTxn, batches: Iterable[tuple[int, int]], cleaned_from: int
                       ) -> AbortedTxn | None:
    """What an aborted-transaction index entry of a replaced segment becomes in the cleaned one
    (Kafka's cleaner re-indexes an abort only while batches of it are left): ``batches`` are the
    ``(base offset, last offset)`` of its producer's transactional data batches in the cleaned segments
    (``cleaned_from`` on). The entry goes when none of them lies in its range (the cleaner removed the
    transaction's data; its marker is left alone, and goes after ``delete.retention.ms``); otherwise its
    first offset becomes the first batch left, as recovery, which rebuilds the index from the batches,
    would find it. An entry that begins before the cleaned segments stays as it is (its data may lie in a
    segment this swap does not touch)."""
    if entry.first_offset < cleaned_from:
        return entry
    firsts = [first for first, last in batches if entry.first_offset <= first and last < entry.last_offset]
    if not firsts:
        return None
    return dataclasses.replace(entry, first_offset=min(firsts))


def _txn_data_batches(path: str, producers: set[int]) -> Iterator[tuple[int, int, int]]:
    """``(producer id, base offset, last offset)`` of each transactional data batch (kept empty or not) of
    ``producers`` in a segment file, from the batch headers only."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while size - pos >= HEADER_SIZE:
            h = BatchHeader.parse(os.pread(fd, HEADER_SIZE, pos))
            if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > size:
                break
            if h.is_transactional and not h.is_control and h.producer_id in producers:
                yield h.producer_id, h.base_offset, h.last_offset
            pos += h.size
    finally:
        os.close(fd)


def _strip_txn_index(directory: str, base: int) -> None:
    merged = seg_path(directory, base, ".txnindex", SWAP)
    if os.path.exists(merged):
        os.rename(merged, seg_path(directory, base, ".txnindex"))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _next_offset_of_file(path: str, base: int) -> int:
    """The offset after the last whole batch of a segment file (headers only; ``base`` if none)."""
    nxt = base
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while size - pos >= HEADER_SIZE:
            header = BatchHeader.parse(os.pread(fd, HEADER_SIZE, pos))
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > size:
                break
            nxt = header.next_offset
            pos += header.size
    finally:
        os.close(fd)
    return nxt


def _base_of(name: str, ending: str) -> int | None:
    stem = name[: -len(ending)]
    return int(stem) if stem.isdigit() else None


def complete_interrupted_swaps(directory: str) -> set[int]:
    """Recovery: drop ``.cleaned``/``.deleted``/``.tmp`` leftovers and complete every ``.swap``.

    Returns the base offsets of segments that came out of a swap (their indexes must be rebuilt)."""
    names = os.listdir(directory)
    for name in names:
        if name.endswith((CLEANED, DELETED, ".tmp")):
            _unlink(os.path.join(directory, name))
    swaps = sorted(b for n in names if n.endswith(".log" + SWAP) and (b := _base_of(n, ".log" + SWAP)) is not None)
    for name in names:  # merged indexes of a swap that never reached its .log.swap step
        if name.endswith(".txnindex" + SWAP) and _base_of(name, ".txnindex" + SWAP) not in swaps:
            _unlink(os.path.join(directory, name))
    if not swaps:
        return set()
    regular = sorted(b for n in names if n.endswith(".log") and (b := _base_of(n, ".log")) is not None)
    for base in swaps:
        end = max(_next_offset_of_file(seg_path(directory, base, ".log", SWAP), base), base + 1)
        for old in regular:
            if base <= old < end:
                for ext in SEGMENT_FILES:
                    _unlink(seg_path(directory, old, ext))
        for ext in (".index", ".timeindex"):
            _unlink(seg_path(directory, base, ext))
        _strip_txn_index(directory, base)
        os.rename(seg_path(directory, base, ".log", SWAP), seg_path(directory, base, ".log"))
    fsync_dir(directory)
    return set(swaps)
