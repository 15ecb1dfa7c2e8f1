"""A cleaner worker's job loop: find brokers in etcd, lease a job, clean it, send the result back.

Stateless: everything a job needs comes from the broker (the segments and the decisions it
made: range, time, delete retention, segment size, map size, producers' last batches). The
lease is renewed every third of its length while the cleaning runs in a thread; when the
broker says the lease is gone, the work is dropped. Only translation and I/O live here; the
cleaning is ``shared.compaction.cleaning.clean``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Iterable

import grpc

from services.cleaner.throttle import Throttler
from shared.compaction.cleaning import CleanJob, CleanResult, SegmentData, clean
from shared.proto import cleaner_pb2 as cpb
from shared.proto import cleaner_pb2_grpc as cgrpc

log = logging.getLogger(__name__)

CHUNK = 1 << 20


class LeaseLost(Exception):
    pass


def job_from(resp: cpb.AcquireJobResponse, segments: Iterable[SegmentData]) -> CleanJob:
    return CleanJob(tuple(segments), resp.first_dirty, resp.end, resp.now_ms,
                    delete_retention_ms=resp.delete_retention_ms, segment_bytes=resp.segment_bytes,
                    dedupe_buffer_bytes=resp.dedupe_buffer_bytes,
                    producer_last_offsets=frozenset(resp.producer_last_offsets), hash_seed=resp.hash_seed)


async def throttle(throttler: Throttler, n: int) -> None:
    delay = throttler.delay_s(n, time.monotonic())
    if delay > 0:
        await asyncio.sleep(delay)


async def read_segments(stub: cgrpc.LogCleanerStub, job_id: str, worker: str, throttler: Throttler
                        ) -> list[SegmentData]:
    parts: dict[int, list[bytes]] = {}
    async for chunk in stub.ReadSegments(cpb.ReadSegmentsRequest(job_id=job_id, worker_id=worker)):
        parts.setdefault(chunk.base_offset, []).append(chunk.data)
        await throttle(throttler, len(chunk.data))
    return [SegmentData(base, b"".join(chunks)) for base, chunks in parts.items()]


async def result_chunks(job_id: str, worker: str, result: CleanResult, throttler: Throttler
                        ) -> AsyncIterator[cpb.CleanedChunk]:
    first = True
    for seg in result.segments:
        data = memoryview(seg.data)
        for pos in range(0, max(len(data), 1), CHUNK):
            chunk = cpb.CleanedChunk(base_offset=seg.base_offset, data=bytes(data[pos : pos + CHUNK]))
            if pos == 0:
                chunk.replaces.extend(seg.replaces)
            if first:
                chunk.job_id, chunk.worker_id, chunk.map_end = job_id, worker, result.map_end
                first = False
            await throttle(throttler, len(chunk.data))
            yield chunk
    if first:  # nothing to replace: still report the map end
        yield cpb.CleanedChunk(job_id=job_id, worker_id=worker, map_end=result.map_end)


async def keep_lease(stub: cgrpc.LogCleanerStub, job_id: str, worker: str, lease_ms: int,
                     progress: Callable[[], float]) -> None:
    while True:
        await asyncio.sleep(max(lease_ms / 3000, 0.05))
        resp = await stub.RenewLease(cpb.RenewLeaseRequest(job_id=job_id, worker_id=worker, progress=progress()),
                                     timeout=max(lease_ms / 3000, 1))
        if resp.error_code:
            raise LeaseLost(resp.message)


async def run_job(stub: cgrpc.LogCleanerStub, resp: cpb.AcquireJobResponse, worker: str,
                  throttler: Throttler | None = None) -> tuple[bool, str]:
    """Clean one leased job; ``(swapped, message)``."""
    state = {"progress": 0.0}
    renew = asyncio.create_task(keep_lease(stub, resp.job_id, worker, resp.lease_ms, lambda: state["progress"]))
    work = asyncio.create_task(_clean_and_send(stub, resp, worker, state, throttler or Throttler()))
    try:
        done, _ = await asyncio.wait({renew, work}, return_when=asyncio.FIRST_COMPLETED)
        if renew in done:
            work.cancel()
            exc = renew.exception()
            return False, f"lease lost: {exc}"
        return work.result()
    except Exception as exc:  # the broker hears about any failure, then the loop goes on
        with contextlib.suppress(grpc.aio.AioRpcError):
            await stub.FailJob(cpb.FailJobRequest(job_id=resp.job_id, worker_id=worker, message=str(exc)))
        return False, str(exc)
    finally:
        renew.cancel()
        work.cancel()


async def _clean_and_send(stub: cgrpc.LogCleanerStub, resp: cpb.AcquireJobResponse, worker: str,
                          state: dict[str, float], throttler: Throttler) -> tuple[bool, str]:
    t0 = time.monotonic()
    segments = await read_segments(stub, resp.job_id, worker, throttler)
    state["progress"] = 0.3
    t1 = time.monotonic()
    result = await asyncio.to_thread(clean, job_from(resp, segments))
    state["progress"] = 0.9
    t2 = time.monotonic()
    answer = await stub.CompleteJob(result_chunks(resp.job_id, worker, result, throttler))
    t3 = time.monotonic()
    log.info("job timings", extra={"job": resp.job_id, "bytes": resp.total_bytes, "read_s": round(t1 - t0, 3),
                                   "clean_s": round(t2 - t1, 3), "send_and_check_s": round(t3 - t2, 3)})
    return answer.error_code == 0, answer.message


class WorkerLoop:
    """Asks the brokers for a job in turn and runs the first one offered."""

    def __init__(self, worker: str, io_max_bytes_per_second: float | None = None) -> None:
        self.worker = worker
        self.throttler = Throttler(io_max_bytes_per_second or math.inf)
        self.channels: dict[str, grpc.aio.Channel] = {}
        self.jobs_done = 0
        self.jobs_failed = 0

    def stub(self, address: str) -> cgrpc.LogCleanerStub:
        ch = self.channels.get(address)
        if ch is None:
            ch = self.channels[address] = grpc.aio.insecure_channel(address, options=[
                ("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)])
        return cgrpc.LogCleanerStub(ch)

    async def once(self, addresses: list[str]) -> bool:
        """Try each broker once; True if a job was run."""
        for address in addresses:
            stub = self.stub(address)
            try:
                resp = await stub.AcquireJob(cpb.AcquireJobRequest(worker_id=self.worker), timeout=10)
            except grpc.aio.AioRpcError as exc:
                log.info("broker unreachable", extra={"broker": address, "error": str(exc.code())})
                continue
            if not resp.found:
                continue
            ok, message = await run_job(stub, resp, self.worker, self.throttler)
            if ok:
                self.jobs_done += 1
            else:
                self.jobs_failed += 1
            log.info("job finished", extra={"log": resp.log, "job": resp.job_id, "ok": ok, "message": message})
            return True
        return False

    async def close(self) -> None:
        for ch in self.channels.values():
            await ch.close()
