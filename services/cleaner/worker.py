"""A cleaner worker's job loop: find brokers in etcd, lease a job, clean it, send the result back.

Stateless: everything a job needs comes from the broker (the segments and the decisions it
made: range, time, delete retention, segment size, map size, producers' last batches, the
aborted transactions of its abort indexes). The
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
from shared.compaction.txn import AbortedRange
from shared.proto import cleaner_pb2 as cpb
from shared.proto import cleaner_pb2_grpc as cgrpc
from shared.proto.cleaner_wire import WireError, encode_cleaned_chunk, read_segment_chunk
from shared.security.transport import aio_channel

log = logging.getLogger(__name__)

CHUNK = 1 << 20
READ_SEGMENTS = "/tidelog.cleaner.v1.LogCleaner/ReadSegments"
COMPLETE_JOB = "/tidelog.cleaner.v1.LogCleaner/CompleteJob"


class LeaseLost(Exception):
    pass


def job_from(resp: cpb.AcquireJobResponse, segments: Iterable[SegmentData]) -> CleanJob:
    return CleanJob(tuple(segments), resp.first_dirty, resp.end, resp.now_ms,
                    delete_retention_ms=resp.delete_retention_ms, segment_bytes=resp.segment_bytes,
                    dedupe_buffer_bytes=resp.dedupe_buffer_bytes,
                    producer_last_offsets=frozenset(resp.producer_last_offsets), hash_seed=resp.hash_seed,
                    aborted_txns=tuple(AbortedRange(a.first_offset, a.last_offset, a.producer_id)
                                       for a in resp.aborted_txns))


async def throttle(throttler: Throttler, n: int) -> None:
    delay = throttler.delay_s(n, time.monotonic())
    if delay > 0:
        await asyncio.sleep(delay)


class ReceiveBuffer:
    """Where a job's segments land: one buffer kept from job to job, grown for a larger job.

    Each chunk is copied once, into memory already touched by earlier jobs. Parsing protobuf messages
    (a copy of each chunk) and joining them per segment (another copy, into fresh memory whose page
    faults cost about as much as the copy) took 0.7-1.0 s of CPU per 250 MB in a measurement here, more
    than cleaning those bytes (0.3 s). A buffer above ``keep_bytes`` is dropped after its job."""

    def __init__(self, keep_bytes: int = 1 << 30) -> None:
        self.keep_bytes = keep_bytes
        self._buf = bytearray()

    def view(self, n: int) -> memoryview:
        if len(self._buf) < n:
            self._buf = bytearray()  # the old one goes first: both at once would double the peak
            self._buf = bytearray(n)
        return memoryview(self._buf)[:n]

    def done(self) -> None:
        if len(self._buf) > self.keep_bytes:
            self._buf = bytearray()

    def discard(self) -> None:
        """Forget the buffer: a job was dropped while its cleaning thread may still read it."""
        self._buf = bytearray()


def segments_reader(channel: grpc.aio.Channel) -> grpc.aio.UnaryStreamMultiCallable:
    """``ReadSegments`` with its answers left serialized (``read_segment_chunk`` reads them in place)."""
    return channel.unary_stream(READ_SEGMENTS, request_serializer=cpb.ReadSegmentsRequest.SerializeToString,
                                response_deserializer=None)


async def read_segments(channel: grpc.aio.Channel, resp: cpb.AcquireJobResponse, worker: str,
                        throttler: Throttler, buffer: ReceiveBuffer) -> list[SegmentData]:
    """The job's segments, as views of ``buffer``: ``resp.total_bytes`` in all, in ``resp.segment_bases``'
    order."""
    total = resp.total_bytes
    view = buffer.view(total)
    bounds: list[tuple[int, int]] = []  # (base offset, start in the buffer)
    pos = 0
    async for msg in segments_reader(channel)(cpb.ReadSegmentsRequest(job_id=resp.job_id, worker_id=worker)):
        try:
            base, start, end = read_segment_chunk(msg)
        except WireError as exc:
            raise RuntimeError(f"a malformed segment chunk from the broker: {exc}") from exc
        if not bounds or bounds[-1][0] != base:
            bounds.append((base, pos))
        if pos + end - start > total:
            raise RuntimeError(f"the broker sent more than the job's {total} bytes")
        view[pos : pos + end - start] = memoryview(msg)[start:end]
        pos += end - start
        await throttle(throttler, end - start)
    if pos != total or [b for b, _ in bounds] != list(resp.segment_bases):
        raise RuntimeError(f"the broker sent {pos} bytes of segments {[b for b, _ in bounds]}, the job has "
                           f"{total} bytes of segments {list(resp.segment_bases)}")
    ends = [start for _, start in bounds[1:]] + [pos]
    return [SegmentData(base, view[start:stop]) for (base, start), stop in zip(bounds, ends, strict=True)]


async def result_chunks(job_id: str, worker: str, result: CleanResult, throttler: Throttler
                        ) -> AsyncIterator[bytes]:
    """The result as serialized ``CleanedChunk`` messages (``encode_cleaned_chunk``)."""
    first = True
    for seg in result.segments:
        data = memoryview(seg.data)
        for pos in range(0, max(len(data), 1), CHUNK):
            piece = data[pos : pos + CHUNK]
            await throttle(throttler, len(piece))
            yield encode_cleaned_chunk(base_offset=seg.base_offset, data=piece, replaces=seg.replaces if pos == 0 else (),
                                       job_id=job_id if first else "", worker_id=worker if first else "",
                                       map_end=result.map_end if first else 0)
            first = False
    if first:  # nothing to replace: still report the map end
        yield encode_cleaned_chunk(base_offset=0, data=b"", job_id=job_id, worker_id=worker, map_end=result.map_end)


def result_sender(channel: grpc.aio.Channel) -> grpc.aio.StreamUnaryMultiCallable:
    """``CompleteJob`` taking ``result_chunks``' bytes as they are."""
    return channel.stream_unary(COMPLETE_JOB, request_serializer=None,
                                response_deserializer=cpb.CompleteJobResponse.FromString)


async def keep_lease(stub: cgrpc.LogCleanerStub, job_id: str, worker: str, lease_ms: int,
                     progress: Callable[[], float]) -> None:
    while True:
        await asyncio.sleep(max(lease_ms / 3000, 0.05))
        resp = await stub.RenewLease(cpb.RenewLeaseRequest(job_id=job_id, worker_id=worker, progress=progress()),
                                     timeout=max(lease_ms / 3000, 1))
        if resp.error_code:
            raise LeaseLost(resp.message)


async def run_job(channel: grpc.aio.Channel, resp: cpb.AcquireJobResponse, worker: str,
                  throttler: Throttler | None = None, buffer: ReceiveBuffer | None = None) -> tuple[bool, str]:
    """Clean one leased job; ``(swapped, message)``."""
    stub = cgrpc.LogCleanerStub(channel)
    buffer = buffer or ReceiveBuffer()
    state = {"progress": 0.0}
    renew = asyncio.create_task(keep_lease(stub, resp.job_id, worker, resp.lease_ms, lambda: state["progress"]))
    work = asyncio.create_task(_clean_and_send(channel, resp, worker, state, throttler or Throttler(), buffer))
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
        if work.done() and not work.cancelled():
            buffer.done()
        else:  # its cleaning thread may still be reading the buffer: the next job gets a new one
            buffer.discard()
        renew.cancel()
        work.cancel()


async def _clean_and_send(channel: grpc.aio.Channel, resp: cpb.AcquireJobResponse, worker: str,
                          state: dict[str, float], throttler: Throttler, buffer: ReceiveBuffer) -> tuple[bool, str]:
    t0 = time.monotonic()
    segments = await read_segments(channel, resp, worker, throttler, buffer)
    state["progress"] = 0.3
    t1 = time.monotonic()
    result = await asyncio.to_thread(clean, job_from(resp, segments))
    state["progress"] = 0.9
    t2 = time.monotonic()
    answer = await result_sender(channel)(result_chunks(resp.job_id, worker, result, throttler))
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
        self.buffer = ReceiveBuffer()
        self.jobs_done = 0
        self.jobs_failed = 0

    def channel(self, address: str) -> grpc.aio.Channel:
        ch = self.channels.get(address)
        if ch is None:
            ch = self.channels[address] = aio_channel(address, options=[
                ("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)])
        return ch

    async def once(self, addresses: list[str]) -> bool:
        """Try each broker once; True if a job was run."""
        for address in addresses:
            channel = self.channel(address)
            stub = cgrpc.LogCleanerStub(channel)
            try:
                resp = await stub.AcquireJob(cpb.AcquireJobRequest(worker_id=self.worker), timeout=10)
            except grpc.aio.AioRpcError as exc:
                log.info("broker unreachable", extra={"broker": address, "error": str(exc.code())})
                continue
            if not resp.found:
                continue
            ok, message = await run_job(channel, resp, self.worker, self.throttler, self.buffer)
            if ok:
                self.jobs_done += 1
            else:
                self.jobs_failed += 1
            log.info("job finished", extra={"log": resp.log, "job": resp.job_id, "ok": ok, "result": message})
            return True
        return False

    async def close(self) -> None:
        for ch in self.channels.values():
            await ch.close()
