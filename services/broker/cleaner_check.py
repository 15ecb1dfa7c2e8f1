"""The broker's check of a cleaning result (``verify_result``), run in a child process.

The check is pure CPU work, about as much as the cleaning itself. In a thread of the broker it
would hold the interpreter lock for most of that time and stall the event loop that serves
produce, fetch, replication and the other workers' segment streams. So the broker checks in child
processes, started with ``spawn`` (nothing of the broker's gRPC or etcd state is inherited): one once a
compacted log of the broker has rolled a segment, another (up to ``log_cleaner_check_processes``) when
results from several workers wait at once. The broker writes the worker's result as ``.cleaned`` files
while it arrives; the child maps those and the job's segment files itself, so only names and sizes travel
through the pipe. The broker still re-checks that the log did not change before it swaps
(``apply_files``).

A child that dies refuses the result it was checking and is replaced on the next check; a child
whose broker died exits within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import mmap
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from services.broker.log.compaction import LogChangedError, OfferedJob
from shared.compaction.cleaning import CleanedSegment, CleanJob, SegmentData
from shared.compaction.verify import CleanVerificationError, verify_result


@dataclass(frozen=True, slots=True)
class CheckSpec:
    """What the child needs to rebuild the job: its segment files and sizes, and its decisions (the job
    without its segments' bytes)."""

    paths: tuple[str, ...]
    bases: tuple[int, ...]
    sizes: tuple[int, ...]
    decisions: CleanJob

    @classmethod
    def of(cls, job: OfferedJob) -> CheckSpec:
        return cls(tuple(s.log_path for s in job.segments), tuple(s.base_offset for s in job.segments), job.sizes,
                   job.with_segments(()))

    def read(self) -> CleanJob:
        """The job with its segments' bytes as they are now (``LogChangedError`` if one went or shrank).

        Each segment file is mapped, not read: the check walks the page cache's pages where they lie,
        with no copy into fresh memory (whose page faults cost as much as a third of the check)."""
        data = []
        for path, base, size in zip(self.paths, self.bases, self.sizes, strict=True):
            try:
                got = mapped(path, size)
            except OSError as exc:
                raise LogChangedError(f"cannot read segment {base} again: {exc}") from exc
            if got is None:
                raise LogChangedError(f"segment {base} shrank while it was being cleaned")
            data.append(SegmentData(base, got))
        return dataclasses.replace(self.decisions, segments=tuple(data))


def mapped(path: str, size: int) -> mmap.mmap | bytes | None:
    """The first ``size`` bytes of a file, mapped read-only (None if the file is shorter)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size < size:
            return None
        return mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) if size else b""


CleanedFile = tuple[int, tuple[int, ...], str, int]  # base offset, replaced bases, path, size


def check_files(spec: CheckSpec, cleaned: list[CleanedFile], map_end: int) -> None:
    """``verify_result`` of a result written as ``.cleaned`` files, mapped like the job's segments."""
    segments = []
    for base, replaces, path, size in cleaned:
        data = mapped(path, size)
        if data is None:
            raise CleanVerificationError(f"cleaned segment {base} is shorter than was received")
        segments.append(CleanedSegment(base, replaces, data))  # type: ignore[arg-type]
    verify_result(spec.read(), segments, map_end)


def _exit_with_parent(parent: int) -> None:
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class CheckProcessDied(CleanVerificationError):
    """The check process died during the check (killed, or a mapped segment was truncated under it)."""


class ResultChecker:
    """Runs ``verify_result`` for the broker: in child processes (up to ``processes`` results checked at
    once, one per child), or (``in_process``, for tests that drive ``CleanerJobs`` directly) in a thread."""

    def __init__(self, in_process: bool = False, processes: int = 1) -> None:
        self.in_process = in_process
        self.processes = processes
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        """Up to ``processes`` children, each started when a check finds none idle (spawned pools start
        their processes on demand)."""
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_exit_with_parent, initargs=(os.getpid(),))
        return self._pool

    @property
    def running(self) -> bool:
        """Whether checks run without a child to start first (in a thread, or the child is up)."""
        return self.in_process or self._pool is not None

    def warm_up(self) -> None:
        """Start the child now if it is not running (a job was just offered: its result will need it)."""
        if not self.in_process and self._pool is None:
            self._executor().submit(int)

    async def check_files(self, job: OfferedJob, cleaned: list[CleanedFile], map_end: int) -> None:
        """Raise ``CleanVerificationError`` unless the ``.cleaned`` files ``cleaned`` are a correct cleaning of
        ``job``. The child maps them itself: the result's bytes never go through the pipe."""
        if self.in_process:
            await asyncio.to_thread(check_files, CheckSpec.of(job), cleaned, map_end)
            return
        await self._in_child(check_files, CheckSpec.of(job), cleaned, map_end)

    async def _in_child(self, fn: Callable[..., None], *args: object) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor(), fn, *args)
        except BrokenProcessPool as exc:
            self.close()
            raise CheckProcessDied(f"the check process died: {exc}") from exc

    def close(self) -> None:
        if self._pool is not None:
            with contextlib.suppress(Exception):
                self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
