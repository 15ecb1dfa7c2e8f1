from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AcquireJobRequest(_message.Message):
    __slots__ = ("worker_id",)
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    def __init__(self, worker_id: _Optional[str] = ...) -> None: ...

class AcquireJobResponse(_message.Message):
    __slots__ = ("found", "job_id", "log", "first_dirty", "end", "now_ms", "delete_retention_ms", "segment_bytes", "dedupe_buffer_bytes", "producer_last_offsets", "segment_bases", "lease_deadline_ms", "lease_ms", "total_bytes", "hash_seed", "aborted_txns")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    FIRST_DIRTY_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    DELETE_RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEDUPE_BUFFER_BYTES_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_LAST_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_BASES_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    HASH_SEED_FIELD_NUMBER: _ClassVar[int]
    ABORTED_TXNS_FIELD_NUMBER: _ClassVar[int]
    found: bool
    job_id: str
    log: str
    first_dirty: int
    end: int
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    dedupe_buffer_bytes: int
    producer_last_offsets: _containers.RepeatedScalarFieldContainer[int]
    segment_bases: _containers.RepeatedScalarFieldContainer[int]
    lease_deadline_ms: int
    lease_ms: int
    total_bytes: int
    hash_seed: int
    aborted_txns: _containers.RepeatedCompositeFieldContainer[AbortedTxnRange]
    def __init__(self, found: _Optional[bool] = ..., job_id: _Optional[str] = ..., log: _Optional[str] = ..., first_dirty: _Optional[int] = ..., end: _Optional[int] = ..., now_ms: _Optional[int] = ..., delete_retention_ms: _Optional[int] = ..., segment_bytes: _Optional[int] = ..., dedupe_buffer_bytes: _Optional[int] = ..., producer_last_offsets: _Optional[_Iterable[int]] = ..., segment_bases: _Optional[_Iterable[int]] = ..., lease_deadline_ms: _Optional[int] = ..., lease_ms: _Optional[int] = ..., total_bytes: _Optional[int] = ..., hash_seed: _Optional[int] = ..., aborted_txns: _Optional[_Iterable[_Union[AbortedTxnRange, _Mapping]]] = ...) -> None: ...

class AbortedTxnRange(_message.Message):
    __slots__ = ("producer_id", "first_offset", "last_offset")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    first_offset: int
    last_offset: int
    def __init__(self, producer_id: _Optional[int] = ..., first_offset: _Optional[int] = ..., last_offset: _Optional[int] = ...) -> None: ...

class ReadSegmentsRequest(_message.Message):
    __slots__ = ("job_id", "worker_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    worker_id: str
    def __init__(self, job_id: _Optional[str] = ..., worker_id: _Optional[str] = ...) -> None: ...

class SegmentChunk(_message.Message):
    __slots__ = ("base_offset", "data")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    data: bytes
    def __init__(self, base_offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class RenewLeaseRequest(_message.Message):
    __slots__ = ("job_id", "worker_id", "progress")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    worker_id: str
    progress: float
    def __init__(self, job_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., progress: _Optional[float] = ...) -> None: ...

class RenewLeaseResponse(_message.Message):
    __slots__ = ("error_code", "message", "lease_deadline_ms")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    message: str
    lease_deadline_ms: int
    def __init__(self, error_code: _Optional[int] = ..., message: _Optional[str] = ..., lease_deadline_ms: _Optional[int] = ...) -> None: ...

class CleanedChunk(_message.Message):
    __slots__ = ("job_id", "worker_id", "map_end", "base_offset", "replaces", "data")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    MAP_END_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REPLACES_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    worker_id: str
    map_end: int
    base_offset: int
    replaces: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, job_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., map_end: _Optional[int] = ..., base_offset: _Optional[int] = ..., replaces: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class CompleteJobResponse(_message.Message):
    __slots__ = ("error_code", "message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    message: str
    def __init__(self, error_code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class FailJobRequest(_message.Message):
    __slots__ = ("job_id", "worker_id", "message")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    worker_id: str
    message: str
    def __init__(self, job_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class FailJobResponse(_message.Message):
    __slots__ = ("error_code",)
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    def __init__(self, error_code: _Optional[int] = ...) -> None: ...

class CleanerStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("job_id", "log", "worker_id", "progress", "started_ms", "lease_deadline_ms")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    log: str
    worker_id: str
    progress: float
    started_ms: int
    lease_deadline_ms: int
    def __init__(self, job_id: _Optional[str] = ..., log: _Optional[str] = ..., worker_id: _Optional[str] = ..., progress: _Optional[float] = ..., started_ms: _Optional[int] = ..., lease_deadline_ms: _Optional[int] = ...) -> None: ...

class LogStatus(_message.Message):
    __slots__ = ("log", "dirty_ratio", "compaction_delay_ms", "first_dirty", "first_uncleanable", "size_bytes", "last_cleaned_ms")
    LOG_FIELD_NUMBER: _ClassVar[int]
    DIRTY_RATIO_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    FIRST_DIRTY_FIELD_NUMBER: _ClassVar[int]
    FIRST_UNCLEANABLE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAST_CLEANED_MS_FIELD_NUMBER: _ClassVar[int]
    log: str
    dirty_ratio: float
    compaction_delay_ms: int
    first_dirty: int
    first_uncleanable: int
    size_bytes: int
    last_cleaned_ms: int
    def __init__(self, log: _Optional[str] = ..., dirty_ratio: _Optional[float] = ..., compaction_delay_ms: _Optional[int] = ..., first_dirty: _Optional[int] = ..., first_uncleanable: _Optional[int] = ..., size_bytes: _Optional[int] = ..., last_cleaned_ms: _Optional[int] = ...) -> None: ...

class QuarantinedLog(_message.Message):
    __slots__ = ("log", "reason")
    LOG_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    log: str
    reason: str
    def __init__(self, log: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class WorkerStats(_message.Message):
    __slots__ = ("worker_id", "cleaned_bytes", "jobs_done", "busy_ms")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    CLEANED_BYTES_FIELD_NUMBER: _ClassVar[int]
    JOBS_DONE_FIELD_NUMBER: _ClassVar[int]
    BUSY_MS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    cleaned_bytes: int
    jobs_done: int
    busy_ms: int
    def __init__(self, worker_id: _Optional[str] = ..., cleaned_bytes: _Optional[int] = ..., jobs_done: _Optional[int] = ..., busy_ms: _Optional[int] = ...) -> None: ...

class CleanerStatusResponse(_message.Message):
    __slots__ = ("broker_id", "jobs", "logs", "quarantined", "cleaned_bytes", "jobs_done", "jobs_refused", "workers")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    CLEANED_BYTES_FIELD_NUMBER: _ClassVar[int]
    JOBS_DONE_FIELD_NUMBER: _ClassVar[int]
    JOBS_REFUSED_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    jobs: _containers.RepeatedCompositeFieldContainer[JobStatus]
    logs: _containers.RepeatedCompositeFieldContainer[LogStatus]
    quarantined: _containers.RepeatedCompositeFieldContainer[QuarantinedLog]
    cleaned_bytes: int
    jobs_done: int
    jobs_refused: int
    workers: _containers.RepeatedCompositeFieldContainer[WorkerStats]
    def __init__(self, broker_id: _Optional[int] = ..., jobs: _Optional[_Iterable[_Union[JobStatus, _Mapping]]] = ..., logs: _Optional[_Iterable[_Union[LogStatus, _Mapping]]] = ..., quarantined: _Optional[_Iterable[_Union[QuarantinedLog, _Mapping]]] = ..., cleaned_bytes: _Optional[int] = ..., jobs_done: _Optional[int] = ..., jobs_refused: _Optional[int] = ..., workers: _Optional[_Iterable[_Union[WorkerStats, _Mapping]]] = ...) -> None: ...
