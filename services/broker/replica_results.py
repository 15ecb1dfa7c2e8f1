"""What the broker's APIs return per partition, and the fetch request as the replica manager takes it.

Plain values shared by the replica manager, the fetch reader and the request layer (no logic but the
limits a fetch is bounded by).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.broker import request_limits
from shared.errors import ErrorCode
from shared.proto.fetch_wire import FetchPartitionData
from shared.types import TopicPartition


@dataclass
class ProduceResult:
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    last_offset: int = -1


@dataclass
class FetchPartitionResult:
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    leader_epoch: int = -1
    records: bytes = b""
    last_stable_offset: int = -1
    #: read_committed: (producer_id, first_offset) of the aborted transactions the records overlap
    aborted: list[tuple[int, int]] | None = None


@dataclass
class FetchSpec:
    tp: TopicPartition
    offset: int
    max_bytes: int
    leader_epoch: int = -1
    log_start_offset: int = -1  # followers: their log start offset (-1: not sent)


@dataclass
class FetchParams:
    replica_id: int = -1
    max_wait_ms: int = 0
    min_bytes: int = 1
    max_bytes: int = 50 * 1024 * 1024
    specs: list[FetchSpec] = field(default_factory=list)
    read_time_s: float = 0.0  # set by fetch: time spent reading (request quotas count it)
    isolation_level: int = 0  # consumers: 1 read_committed (below the last stable offset)

    def bounded(self) -> FetchParams:
        """The same request with every size and wait inside the broker's limits (``request_limits``)."""
        max_bytes = request_limits.fetch_max_bytes(self.max_bytes)
        specs = [FetchSpec(s.tp, s.offset, request_limits.partition_max_bytes(s.max_bytes, max_bytes), s.leader_epoch,
                           s.log_start_offset) for s in self.specs]
        return FetchParams(self.replica_id, request_limits.fetch_wait_ms(self.max_wait_ms),
                           request_limits.fetch_min_bytes(self.min_bytes), max_bytes, specs,
                           isolation_level=self.isolation_level)


def grpc_partition_data(tp: TopicPartition, r: FetchPartitionResult, fetch_offset: int,
                        next_offset: int) -> FetchPartitionData:
    """One partition of a gRPC fetch response (``shared/proto/fetch_wire``), for every gRPC fetch path."""
    return FetchPartitionData(
        partition=tp.partition, error_code=r.error, error_message=r.message,
        high_watermark=r.high_watermark, last_stable_offset=r.last_stable_offset,
        log_start_offset=r.log_start_offset, log_end_offset=r.log_end_offset,
        leader_epoch=r.leader_epoch, records=r.records, fetch_offset=fetch_offset, next_offset=next_offset,
        aborted_transactions=r.aborted or ())
