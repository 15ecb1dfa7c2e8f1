"""Read one partition's offset range as raw batches: the building block of the Spark source.

Synchronous and single-threaded from the caller's view (a Spark task reads one
range): fetches from the leader over one FetchStream (a stream message costs far
less than a unary call, FACTS.md), retries on leadership changes, yields whole
batches and stops at the end offset. Decoding is left to the caller so it can
build columns directly.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

import grpc

from shared.client.cluster import ClusterClient
from shared.errors import ErrorCode, OffsetOutOfRangeError, TidelogError, error_for
from shared.proto import tidelog_pb2 as pb
from shared.records.batch import BatchHeader, iter_batches
from shared.types import TopicPartition


class _FetchStream:
    """A FetchStream call used synchronously: put one request, take its response."""

    def __init__(self, stub: Any, leader: int, timeout_s: float) -> None:
        self.leader = leader
        self.requests: queue.SimpleQueue[pb.FetchRequest | None] = queue.SimpleQueue()
        self.responses = stub.FetchStream(iter(self.requests.get, None), timeout=timeout_s)

    def fetch(self, req: pb.FetchRequest) -> pb.FetchResponse:
        self.requests.put(req)
        return next(self.responses)

    def close(self) -> None:
        self.requests.put(None)
        self.responses.cancel()


def _request(tp: TopicPartition, offset: int, max_bytes: int) -> pb.FetchRequest:
    return pb.FetchRequest(
        replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=max_bytes,
        topics=[pb.FetchTopic(name=tp.topic, partitions=[pb.FetchPartition(
            partition=tp.partition, fetch_offset=offset, partition_max_bytes=max_bytes)])])


def read_range(cluster: ClusterClient, tp: TopicPartition, start: int, end: int, *,
               max_bytes: int = 8 * 1024 * 1024, timeout_s: float = 60.0,
               fail_on_data_loss: bool = True) -> Iterator[tuple[bytes, int, BatchHeader]]:
    """Yield ``(buffer, position, header)`` for each batch holding offsets in ``[start, end)``."""
    offset = start
    deadline = time.monotonic() + timeout_s
    stream: _FetchStream | None = None
    try:
        while offset < end:
            try:
                leader = cluster.leader_for(tp)
                if stream is None or stream.leader != leader:
                    if stream is not None:
                        stream.close()
                    stream = _FetchStream(cluster.broker_stub(leader), leader, 3600)
                p = stream.fetch(_request(tp, offset, max_bytes)).topics[0].partitions[0]
            except (grpc.RpcError, TidelogError, StopIteration) as exc:
                if stream is not None:
                    stream.close()
                    stream = None
                if time.monotonic() > deadline:
                    raise TidelogError(f"reading {tp} at {offset}: {exc!r}", code=ErrorCode.REQUEST_TIMED_OUT) from exc
                time.sleep(0.2)
                cluster.refresh()
                continue
            if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and offset < p.log_start_offset:
                if fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        f"{tp}: offsets {offset}..{p.log_start_offset - 1} were deleted (log start "
                        f"{p.log_start_offset}); set failOnDataLoss=false to skip them")
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
    finally:
        if stream is not None:
            stream.close()
