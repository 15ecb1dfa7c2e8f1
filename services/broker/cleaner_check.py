"""The broker's check of a cleaning result (``verify_result``), run in a child process.

The check is pure CPU work, about as much as the cleaning itself. In a thread of the broker it
would hold the interpreter lock for most of that time and stall the event loop that serves
produce, fetch, replication and the other workers' segment streams. So the broker checks in one
child process, started with ``spawn`` once a compacted log of the broker has rolled a segment (nothing of the
broker's gRPC or etcd state is inherited), which reads the job's segment files itself: only the
cleaned segments travel through the pipe. The broker still re-checks that the log did not change
before it swaps (``apply_result``).

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
                with open(path, "rb") as f:
                    if os.fstat(f.fileno()).st_size < size:
                        raise LogChangedError(f"segment {base} shrank while it was being cleaned")
                    got = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) if size else b""
            except OSError as exc:
                raise LogChangedError(f"cannot read segment {base} again: {exc}") from exc
            data.append(SegmentData(base, got))
        return dataclasses.replace(self.decisions, segments=tuple(data))


def check_in_child(spec: CheckSpec, segments: list[CleanedSegment], map_end: int) -> None:
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
    """Runs ``verify_result`` for the broker: in a child process, or (``in_process``, for tests that
    drive ``CleanerJobs`` directly) in a thread."""

    def __init__(self, in_process: bool = False) -> None:
        self.in_process = in_process
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
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

    async def check(self, job: OfferedJob, segments: list[CleanedSegment], map_end: int) -> None:
        """Raise ``CleanVerificationError`` unless ``segments`` is a correct cleaning of ``job``."""
        if self.in_process:
            await asyncio.to_thread(verify_result, job.read(), segments, map_end)
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor(), check_in_child, CheckSpec.of(job), segments, map_end)
        except BrokenProcessPool as exc:
            self.close()
            raise CheckProcessDied(f"the check process died: {exc}") from exc

    def close(self) -> None:
        if self._pool is not None:
            with contextlib.suppress(Exception):
                self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
