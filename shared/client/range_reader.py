"""Read one partition's offset range as raw batches: the building block of the Spark source.

Synchronous and thread-free (a Spark task reads one range): fetches from the
leader with retries on leadership changes, yields whole batches and stops at
the end offset. Decoding is left to the caller so it can build columns directly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc

from shared.client.cluster import ClusterClient
from shared.errors import ErrorCode, OffsetOutOfRangeError, TidelogError, error_for
from shared.proto import tidelog_pb2 as pb
from shared.records.batch import BatchHeader, iter_batches
from shared.types import TopicPartition


def read_range(cluster: ClusterClient, tp: TopicPartition, start: int, end: int, *,
               max_bytes: int = 8 * 1024 * 1024, timeout_s: float = 60.0,
               fail_on_data_loss: bool = True) -> Iterator[tuple[bytes, int, BatchHeader]]:
    """Yield ``(buffer, position, header)`` for each batch holding offsets in ``[start, end)``."""
    offset = start
    deadline = time.monotonic() + timeout_s
    while offset < end:
        try:
            leader = cluster.leader_for(tp)
            stub = cluster.broker_stub(leader)
            resp = stub.Fetch(pb.FetchRequest(
                replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=max_bytes,
                topics=[pb.FetchTopic(name=tp.topic, partitions=[pb.FetchPartition(
                    partition=tp.partition, fetch_offset=offset, partition_max_bytes=max_bytes)])]),
                timeout=30)
            p = resp.topics[0].partitions[0]
        except (grpc.RpcError, TidelogError) as exc:
            if time.monotonic() > deadline:
                raise TidelogError(f"reading {tp} at {offset}: {exc}", code=ErrorCode.REQUEST_TIMED_OUT) from exc
            time.sleep(0.2)
            cluster.refresh()
            continue
        if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and offset < p.log_start_offset:
            if fail_on_data_loss:
                raise OffsetOutOfRangeError(
                    f"{tp}: offsets {offset}..{p.log_start_offset - 1} were deleted (log start {p.log_start_offset}); "
                    "set failOnDataLoss=false to skip them")
            offset = p.log_start_offset
            continue
        if p.error_code:
            err = error_for(p.error_code, p.error_message)
            if not err.retriable or time.monotonic() > deadline:
                raise err
            time.sleep(0.2)
            cluster.refresh()
            continue
        data = p.records
        if not data:
            if p.high_watermark < end and time.monotonic() > deadline:
                raise TidelogError(f"{tp}: offsets up to {end} never became available (HW {p.high_watermark})",
                                   code=ErrorCode.REQUEST_TIMED_OUT)
            if offset >= p.high_watermark and p.high_watermark < end:
                time.sleep(0.05)  # waiting for replication to reach the planned end
            continue
        deadline = time.monotonic() + timeout_s
        for pos, header in iter_batches(data):
            if header.last_offset >= offset and header.base_offset < end:
                yield data, pos, header
            offset = max(offset, header.next_offset)
            if offset >= end:
                return
