"""A worker's receive path: ``SegmentChunk`` messages read in place (``cleaner_wire``) into a buffer kept
from job to job, and what it refuses (a malformed chunk, more or other segments than the job's)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from services.cleaner.throttle import Throttler
from services.cleaner.worker import ReceiveBuffer, read_segments
from shared.proto import cleaner_pb2 as cpb


def test_the_buffer_is_kept_from_job_to_job_and_dropped_when_large() -> None:
    buf = ReceiveBuffer(keep_bytes=100)
    first = buf.view(50)
    first[:3] = b"abc"
    assert len(buf.view(20)) == 20 and buf.view(3).tobytes() == b"abc"  # the same memory
    buf.done()
    assert buf.view(3).tobytes() == b"abc"
    assert len(buf.view(200)) == 200  # grown
    buf.done()  # above keep_bytes: dropped
    assert buf.view(3).tobytes() == b"\0\0\0"
    buf.view(3)[:] = b"xyz"
    buf.discard()
    assert buf.view(3).tobytes() == b"\0\0\0"


def job(bases: list[int], total: int) -> cpb.AcquireJobResponse:
    return cpb.AcquireJobResponse(found=True, job_id="j", segment_bases=bases, total_bytes=total)


async def receive(answers: list[bytes], resp: cpb.AcquireJobResponse) -> list[tuple[int, bytes]]:
    """``read_segments`` against an in-process server whose ReadSegments answers ``answers`` verbatim."""

    async def reply(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        for a in answers:
            yield a

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("tidelog.cleaner.v1.LogCleaner", {
        "ReadSegments": grpc.unary_stream_rpc_method_handler(reply)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            segs = await read_segments(ch, resp, "w", Throttler(), ReceiveBuffer())
            return [(s.base_offset, bytes(s.data)) for s in segs]
    finally:
        await server.stop(None)


def chunk(base: int, data: bytes) -> bytes:
    return cpb.SegmentChunk(base_offset=base, data=data).SerializeToString()


def test_segments_land_in_order_empty_ones_included() -> None:
    answers = [chunk(0, b"aa"), chunk(0, b"bb"), chunk(7, b""), chunk(9, b"c")]
    assert asyncio.run(receive(answers, job([0, 7, 9], 5))) == [(0, b"aabb"), (7, b""), (9, b"c")]


@pytest.mark.parametrize("answers,resp,error", [
    ([b"\x12\x09abc"], job([0], 3), "malformed segment chunk"),
    ([chunk(0, b"abcd")], job([0], 3), "more than the job's 3 bytes"),
    ([chunk(0, b"ab")], job([0], 3), "sent 2 bytes"),
    ([chunk(0, b"abc"), chunk(5, b"")], job([0], 3), "segments \\[0, 5\\]"),
])
def test_a_stream_that_is_not_the_job_is_refused(answers: list[bytes], resp: cpb.AcquireJobResponse,
                                                 error: str) -> None:
    with pytest.raises(RuntimeError, match=error):
        asyncio.run(receive(answers, resp))
