"""Read one partition's offset range as raw batches: the building block of the Spark source.

Synchronous and single-threaded from the caller's view (a Spark task reads one
range): fetches from the leader over one pipelined FetchStream (see
fetch_stream), retries on leadership changes, yields whole batches and stops at
the end offset. Decoding is left to the caller so it can build columns directly.

With ``isolation_level`` 1 (read_committed) the broker answers up to the last stable
offset with the aborted transactions each response overlaps, and each response's
batches pass the consumer's ``AbortedFilter`` (one per response, as Kafka's
``CompletedFetch``): no aborted transaction's batch and no marker is handed out.
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
from shared.proto import tidelog_pb2 as pb
from shared.records.header import BatchHeader, iter_batches
from shared.records.read_committed import AbortedFilter, marker_type
from shared.types import TopicPartition


def _request(tp: TopicPartition, offset: int, max_bytes: int, incremental: bool,
             isolation_level: int) -> pb.FetchRequest:
    return fetch_request([(tp, offset)], max_wait_ms=500, min_bytes=1, max_bytes=max_bytes,
                         partition_max_bytes=max_bytes, incremental=incremental, isolation_level=isolation_level)


#: The first fetch of a range asks for at most this much: its answer gives the record size that decides
#: how many of the full-size fetches behind it are worth sending, and a small one arrives soon.
FIRST_FETCH_MAX_BYTES = 1024 * 1024


def read_range(cluster: ClusterClient, tp: TopicPartition, start: int, end: int, *,
               max_bytes: int = 4 * 1024 * 1024, timeout_s: float = 60.0, depth: int = 3,
               fail_on_data_loss: bool = True, isolation_level: int = 0) -> Iterator[tuple[bytes, int, BatchHeader]]:
    """Yield ``(buffer, position, header)`` for each batch holding offsets in ``[start, end)``.

    Up to ``depth`` fetches are in flight, but no more than the bytes left to the end offset
    (estimated from the record sizes seen so far) need.
    """
    for data, batches in read_range_responses(cluster, tp, start, end, max_bytes=max_bytes, timeout_s=timeout_s,
                                              depth=depth, fail_on_data_loss=fail_on_data_loss,
                                              isolation_level=isolation_level):
        for pos, header in batches:
            yield data, pos, header


def read_range_responses(cluster: ClusterClient, tp: TopicPartition, start: int, end: int, *,
                         max_bytes: int = 4 * 1024 * 1024, timeout_s: float = 60.0, depth: int = 3,
                         fail_on_data_loss: bool = True, isolation_level: int = 0,
                         ) -> Iterator[tuple[bytes, list[tuple[int, BatchHeader]]]]:
    """``read_range`` a response at a time: ``(buffer, [(position, header), ...])``, the batches of one
    fetched response that hold offsets in ``[start, end)`` (so a caller can decode them together).

    A batch that cannot be read raises ``UnreadableBatchError`` after the response's batches before
    it were yielded (as a response of their own).
    """
    offset = start
    deadline = time.monotonic() + timeout_s
    stream: PipelinedFetchStream[None] | None = None
    bytes_per_offset = 0.0
    try:
        while offset < end:
            try:
                if stream is None:
                    leader = cluster.leader_for(tp)
                    stream = PipelinedFetchStream(cluster.broker_stub(leader), leader)
                    first = max_bytes if bytes_per_offset else min(max_bytes, FIRST_FETCH_MAX_BYTES)
                    stream.send(_request(tp, offset, first, False, isolation_level), None)
                elif stream.in_flight == 0:
                    stream.send(_request(tp, offset, max_bytes, True, isolation_level), None)
                while (stream.in_flight < depth and bytes_per_offset
                       and (end - offset) * bytes_per_offset > stream.in_flight * max_bytes):
                    stream.send(_request(tp, offset, max_bytes, True, isolation_level), None)
                p = stream.receive()[0].topics[0].partitions[0]
            except (grpc.RpcError, TidelogError, StopIteration) as exc:
                forget_traceback(exc)
                if stream is not None:
                    stream.close()
                    stream = None
                if time.monotonic() > deadline:
                    raise TidelogError(f"reading {tp} at {offset}: {exc!r}", code=ErrorCode.REQUEST_TIMED_OUT) from exc
                time.sleep(0.2)
                cluster.refresh()
                continue
            if p.error_code or p.fetch_offset != offset:
                stream.close()  # the broker dropped its position, or we are out of step: start over
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
                if not err.retriable or time.monotonic() > deadline:
                    raise err
                time.sleep(0.2)
                cluster.refresh()
                continue
            if stream is None:
                continue
            data, begin, stop = p.buf, p.records_start, p.records_end  # the batches, in the received bytes
            if begin == stop:
                visible = p.last_stable_offset if isolation_level else p.high_watermark
                if visible < end and time.monotonic() > deadline:
                    raise TidelogError(f"{tp}: offsets up to {end} never became available "
                                       f"({'LSO' if isolation_level else 'HW'} {visible})",
                                       code=ErrorCode.REQUEST_TIMED_OUT)
                if offset >= visible and visible < end:
                    time.sleep(0.05)  # waiting for replication (or open transactions) to reach the planned end
                continue
            deadline = time.monotonic() + timeout_s
            bytes_per_offset = max(bytes_per_offset, (stop - begin) / max(p.next_offset - offset, 1))
            keep = AbortedFilter(p.aborted_transactions) if isolation_level else None
            out: list[tuple[int, BatchHeader]] = []
            try:
                for pos, header in iter_batches(data, start=begin, end=stop):
                    if keep is not None and not keep.keep(
                            header, marker_type(data, pos, header) if header.is_control else None):
                        pass  # read_committed: an aborted transaction's batch, or a marker
                    elif header.last_offset >= offset and header.base_offset < end:
                        out.append((pos, header))
                    offset = max(offset, header.next_offset)
                    if offset >= end:
                        break
            except CorruptRecordError as exc:  # the batches before it are handed out first
                if out:
                    yield data, out
                raise UnreadableBatchError(tp.topic, tp.partition, offset, exc.args[0]) from None
            if out:
                yield data, out
    finally:
        if stream is not None:
            stream.close()
