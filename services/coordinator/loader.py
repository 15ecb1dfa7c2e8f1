"""Loading a partition of an internal topic (``__consumer_offsets``, ``__transaction_state``): read
it from the leader up to a given offset and hand every record (key, value) to the shard's replay, counting the rate."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import grpc

from services.coordinator.writer import StubFor
from shared.errors import ErrorCode
from shared.offsets_topic import OFFSETS_TOPIC
from shared.proto import tidelog_pb2 as pb
from shared.records import decode_records, iter_batches, records_section


async def load_partition(partition: int, end_offset: int, stub_for: StubFor,
                         replay: Callable[[bytes, bytes | None], None], timeout_s: float = 60.0,
                         topic: str = OFFSETS_TOPIC) -> tuple[int, float]:
    """Replay records ``[log start, end_offset)``; returns ``(records, seconds)``."""
    start = time.monotonic()
    offset, count = 0, 0
    while offset < end_offset:
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"loading {topic} partition {partition} took over {timeout_s}s")
        stub = await stub_for(partition)
        if stub is None:
            await asyncio.sleep(0.1)
            continue
        req = pb.FetchRequest(replica_id=-1, max_wait_ms=0, max_bytes=8 << 20, client_id="coordinator-loader", topics=[
            pb.FetchTopic(name=topic, partitions=[
                pb.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=4 << 20)])])
        try:
            resp = await stub.Fetch(req, timeout=10)
        except grpc.aio.AioRpcError:
            await asyncio.sleep(0.1)
            continue
        pr = resp.topics[0].partitions[0]
        if pr.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and pr.log_start_offset > offset:
            offset = pr.log_start_offset
            continue
        if pr.error_code:
            await asyncio.sleep(0.1)
            continue
        data = pr.records
        before = offset
        for pos, header in iter_batches(data):
            if header.is_control:
                offset = header.last_offset + 1
                continue
            for rec in decode_records(header, records_section(data, header, pos)):
                if rec.offset >= offset and rec.offset < end_offset and rec.key is not None:
                    replay(rec.key, rec.value)
                    count += 1
            offset = max(offset, header.last_offset + 1)
        if pr.next_offset > offset:
            offset = pr.next_offset
        if offset == before:
            await asyncio.sleep(0.05)  # nothing readable yet (e.g. the high watermark is catching up)
    return count, time.monotonic() - start
