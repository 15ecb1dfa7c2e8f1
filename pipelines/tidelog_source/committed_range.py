"""Read one partition's offset range under ``kafka.isolation.level=read_committed``.

``shared.client.range_reader.read_range`` fetches read_uncommitted and does not hand out the aborted
transactions a fetch covers, so the read_committed source reads with this loop instead: each fetch
asks for ``isolation_level=1`` (the broker answers up to the last stable offset, with the aborted
transactions the returned range overlaps) and each response's batches go through the consumer's
``AbortedFilter`` (one filter per response, as Kafka's ``CompletedFetch``), so neither an aborted
transaction's records nor any marker is handed out.

The planned end is at most the LSO the driver listed (ListOffsets latest under read_committed), so
the range is stable when it is read: the loop never waits on an open transaction.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc

from shared.client.cluster import ClusterClient
from shared.client.fetch_stream import PipelinedFetchStream, fetch_request
from shared.client.grpc_calls import forget_traceback
from shared.errors import (
    CorruptRecordError,
    ErrorCode,
    OffsetOutOfRangeError,
    TidelogError,
    UnreadableBatchError,
    error_for,
)
from shared.records.header import BatchHeader, iter_batches
from shared.records.read_committed import AbortedFilter, marker_type
from shared.types import TopicPartition

READ_COMMITTED = 1  # Kafka's wire value of isolation.level=read_committed


def read_committed_range(cluster: ClusterClient, tp: TopicPartition, start: int, end: int, *,
                         max_bytes: int = 4 * 1024 * 1024, timeout_s: float = 60.0,
                         fail_on_data_loss: bool = True) -> Iterator[tuple[bytes, int, BatchHeader]]:
    """Yield ``(buffer, position, header)`` for each committed (or non-transactional) data batch holding
    offsets in ``[start, end)``; aborted batches and control batches are left out."""
    offset = start
    deadline = time.monotonic() + timeout_s
    stream: PipelinedFetchStream[None] | None = None

    def retry_later(exc: BaseException) -> None:
        if time.monotonic() > deadline:
            raise TidelogError(f"reading {tp} at {offset} (read_committed): {exc!r}",
                               code=ErrorCode.REQUEST_TIMED_OUT) from exc
        time.sleep(0.2)
        cluster.refresh()

    try:
        while offset < end:
            try:
                if stream is None:
                    leader = cluster.leader_for(tp)
                    stream = PipelinedFetchStream(cluster.broker_stub(leader), leader)
                    incremental = False
                else:
                    incremental = True
                stream.send(fetch_request([(tp, offset)], max_wait_ms=500, min_bytes=1, max_bytes=max_bytes,
                                          partition_max_bytes=max_bytes, incremental=incremental,
                                          isolation_level=READ_COMMITTED), None)
                p = stream.receive()[0].topics[0].partitions[0]
            except (grpc.RpcError, TidelogError, StopIteration) as exc:
                forget_traceback(exc)
                if stream is not None:
                    stream.close()
                    stream = None
                retry_later(exc)
                continue
            if p.error_code or p.fetch_offset != offset:
                stream.close()
                stream = None
            if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and offset < p.log_start_offset:
                if fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        f"{tp}: offsets {offset}..{p.log_start_offset - 1} were deleted (log start "
                        f"{p.log_start_offset}); set failOnDataLoss=false to skip them")
                offset = p.log_start_offset
                continue
            if p.error_code:
                err = error_for(p.error_code, p.error_message)
                if not err.retriable:
                    raise err
                retry_later(err)
                continue
            if stream is None:
                continue
            data, begin, stop = p.buf, p.records_start, p.records_end
            if begin == stop:  # nothing stable past ``offset`` yet (the planned end is at most the LSO)
                if time.monotonic() > deadline:
                    raise TidelogError(f"{tp}: offsets up to {end} never became stable (LSO {p.last_stable_offset})",
                                       code=ErrorCode.REQUEST_TIMED_OUT)
                time.sleep(0.05)
                continue
            deadline = time.monotonic() + timeout_s
            keep = AbortedFilter(p.aborted_transactions)
            try:
                for pos, header in iter_batches(data, start=begin, end=stop):
                    kept = keep.keep(header, marker_type(data, pos, header) if header.is_control else None)
                    if kept and header.last_offset >= offset and header.base_offset < end:
                        yield data, pos, header
                    offset = max(offset, header.next_offset)
                    if offset >= end:
                        return
            except CorruptRecordError as exc:
                raise UnreadableBatchError(tp.topic, tp.partition, offset, exc.args[0]) from None
    finally:
        if stream is not None:
            stream.close()
