"""The consumer: manual assignment, positions, and a fetcher thread that prefetches.

The fetcher thread keeps one fetch stream per leader broker: Kafka's Fetch on the
broker's Kafka listener (``kafka_fetch``; each partition in one request at a time,
up to two requests in flight for different partitions), or a pipelined gRPC
FetchStream (``fetch_stream``) with up to ``fetch_depth`` fetches in flight, at each
partition's *fetch position* (which runs ahead of the application's position); a
reader thread per stream files the responses.
Completed fetches wait, still as raw batches, in a buffer bounded by
``prefetch_bytes``; ``poll()`` decodes them one batch at a time in the caller's
thread, drops records before the position (a batch can start earlier) and
control records, and advances the position. ``seek`` bumps a per-partition
generation so stale prefetched data is discarded and the stream is positioned
again (after it drains) with an explicit request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from itertools import chain
from typing import TYPE_CHECKING, Any

import grpc
import numpy as np

from shared.client.client_metrics import ConsumerStats
from shared.client.cluster import ClusterClient
from shared.client.fetch_stream import PipelinedFetchStream, fetch_request
from shared.client.group_member import ConsumerRebalanceListener, GroupMember
from shared.client.grpc_calls import forget_traceback
from shared.client.kafka_fetch import KafkaFetchError, KafkaFetchResponse, KafkaFetchStream
from shared.client.security import client_security
from shared.client.transactions import ConsumerGroupMetadata
from shared.errors import (
    CorruptRecordError,
    ErrorCode,
    OffsetOutOfRangeError,
    TidelogError,
    UnreadableBatchError,
    error_for,
)
from shared.netprobe import tcp_reachable
from shared.proto import tidelog_pb2 as pb
from shared.proto.fetch_wire import FetchResponseView
from shared.records.columns import Columns, decode_columns, decode_columns_many
from shared.records.decoder import decode_records, records_section
from shared.records.header import HEADER_SIZE, BatchHeader, iter_batches
from shared.records.positions import RecordPositions
from shared.records.read_committed import AbortedFilter, marker_type
from shared.records.record import Record
from shared.runtime import tune_allocator, tune_gc, tune_switch_interval
from shared.types import TopicPartition

if TYPE_CHECKING:  # pyarrow is imported by poll_arrow() only: plain consumers (and the CLI) start without it
    import pyarrow as pa

    from shared.records.arrow import Piece

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1
#: Kafka's isolation.level names and their wire values
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}


class ConsumerRecord(Record):
    """A record as the consumer returns it: ``topic, partition, offset, timestamp, timestamp_type, key, value, headers``.

    ``topic``, ``partition`` and ``timestamp_type`` are attributes of a small subclass made
    once per partition, so decoding creates one object per record. (A NamedTuple made in C by
    ``tuple.__new__`` over zipped columns was measured too: no faster, since a tuple subclass is
    built as a plain tuple and then copied.)
    """

    __slots__ = ()
    topic: str = ""
    partition: int = -1
    timestamp_type: int = 0

    def __repr__(self) -> str:
        return (f"ConsumerRecord(topic={self.topic!r}, partition={self.partition}, offset={self.offset}, "
                f"timestamp={self.timestamp}, key={self.key!r}, value={self.value!r}, headers={self.headers!r})")


_RECORD_CLASSES: dict[tuple[str, int, int], type[ConsumerRecord]] = {}


def record_class(topic: str, partition: int, timestamp_type: int) -> type[ConsumerRecord]:
    key = (topic, partition, timestamp_type)
    cls = _RECORD_CLASSES.get(key)
    if cls is None:
        cls = type("ConsumerRecord", (ConsumerRecord,),
                   {"__slots__": (), "topic": topic, "partition": partition, "timestamp_type": timestamp_type})
        _RECORD_CLASSES[key] = cls
    return cls


class ConsumerRecords:
    """What ``poll()`` returns: iterate for every record, or use ``records(tp)``."""

    def __init__(self, by_partition: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        self.by_partition = by_partition

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return chain.from_iterable(self.by_partition.values())

    def __len__(self) -> int:
        return sum(len(r) for r in self.by_partition.values())

    def __bool__(self) -> bool:
        return any(self.by_partition.values())

    def records(self, tp: TopicPartition) -> list[ConsumerRecord]:
        return self.by_partition.get(tp, [])

    def partitions(self) -> list[TopicPartition]:
        return list(self.by_partition)

    count = __len__


@dataclass
class Completed:
    """A partition's part of a fetch response: its batches are ``data[start:end]``, where ``data``
    is the response as received (decoded in place: no copy of the records)."""

    tp: TopicPartition
    generation: int
    fetch_offset: int
    data: bytes
    start: int
    end: int
    high_watermark: int
    log_start_offset: int
    error: int = 0
    message: str = ""
    #: read_committed: (producer_id, first_offset) of the aborted transactions the fetched range overlaps
    aborted: list[tuple[int, int]] | None = None


#: ``_take``'s answer when the poll must return what it has first
_LATER: Any = object()


class _Cursor:
    """A completed fetch being handed out by poll(): its batches are decoded one at a time, so only a
    batch's worth of records is alive at once (which keeps the garbage collector's work small).

    ``poll()`` decodes a batch into ``records``; ``poll_arrow()`` into columns (``cols``). The batch being
    handed out is kept (``batch``), so a switch between the two puts it back to be decoded the other
    way from the partition's position (``undo``)."""

    __slots__ = ("tp", "generation", "data", "batches", "records", "index", "end", "error", "batch", "cols")

    def __init__(self, tp: TopicPartition, generation: int, data: bytes, batches: deque[tuple[int, BatchHeader]],
                 error: UnreadableBatchError | None = None, end: int | None = None) -> None:
        self.tp = tp
        self.generation = generation
        self.data = data
        self.batches = batches
        # ``end``: past batches read_committed left out (aborted ones, markers) too
        self.end = end if end is not None else (batches[-1][1].next_offset if batches else 0)
        self.records: list[ConsumerRecord] = []
        self.index = 0
        self.error = error  # the batch after ``batches`` cannot be read: raised once they are handed out
        self.batch: list[tuple[int, BatchHeader]] = []  # the batches ``records`` or ``cols`` came from
        self.cols: Piece | None = None  # what poll_arrow() has left of a batch (max_records cut it)

    def undo(self) -> None:
        """Put the batch being handed out back, undecoded (decoded again from the position, the other way)."""
        if self.cols is not None or self.index < len(self.records):
            self.batches.extendleft(reversed(self.batch))
        self.batch = []
        self.cols = None
        self.records = []
        self.index = 0

    def _fail(self, header: BatchHeader, position: int, exc: CorruptRecordError) -> None:
        self.error = UnreadableBatchError(self.tp.topic, self.tp.partition, max(header.base_offset, position),
                                          exc.args[0])
        self.batches.clear()

    def decode_next(self, position: int) -> bool:
        """Decode the next batch holding records at or after ``position``; False when none is left (or
        the next one cannot be decoded: then ``error`` names it, and no batch after it is handed out)."""
        if self.cols is not None:
            self.undo()
        while self.batches:
            pos, header = self.batches.popleft()
            if header.is_control or header.last_offset < position:
                continue
            cls = record_class(self.tp.topic, self.tp.partition, header.timestamp_type)
            try:
                if header.compression:
                    recs: list[ConsumerRecord] = decode_records(header, records_section(self.data, header, pos), cls)  # type: ignore[assignment]
                else:  # straight from the fetched buffer, without copying the section out
                    recs = decode_records(header, self.data, cls, start=pos + HEADER_SIZE, end=pos + header.size)  # type: ignore[assignment]
            except CorruptRecordError as exc:
                self._fail(header, position, exc)
                return False
            if header.base_offset < position:
                recs = [r for r in recs if r.offset >= position]
            if recs:
                self.batch = [(pos, header)]
                self.records = recs
                self.index = 0
                return True
        return False

    def next_columns(self, position: int, want: int) -> list[Piece]:
        """Up to ``want`` records at or after ``position``, as columns (a run of uncompressed batches is
        decoded at once: ``decode_columns_many``); what ``want`` cuts off is kept in ``cols``. Stops
        before a batch that cannot be decoded (``error`` names it)."""
        from shared.records.arrow import take_piece

        if self.index < len(self.records):
            self.undo()
        pieces: list[Piece] = []
        n = 0
        while n < want:
            if self.cols is None and not self._decode_columns(position, want - n):
                break
            piece, self.cols = self.cols, None
            assert piece is not None
            left = len(piece[1]) - (want - n)
            if left > 0:  # keep the rest for the next call
                self.cols = take_piece(piece, np.arange(want - n, len(piece[1])))
                piece = take_piece(piece, np.arange(want - n))
            if len(piece[1]):  # (a compacted batch can hold nothing at or after the position)
                pieces.append(piece)
                n += len(piece[1])
        return pieces

    def _decode_columns(self, position: int, want: int) -> bool:
        """Decode the next batches holding records at or after ``position`` into ``cols``: uncompressed ones
        together, up to about ``want`` records, a compressed one alone. False when none is left, or the
        next one cannot be decoded (then ``error`` names it)."""
        from shared.records.arrow import take_piece

        group: list[tuple[int, BatchHeader]] = []
        count = 0
        while self.batches and count < want:
            pos, header = self.batches[0]
            if header.is_control or header.last_offset < position:
                self.batches.popleft()
                continue
            if header.compression and group:
                break
            group.append(self.batches.popleft())
            count += header.records_count
            if header.compression:
                break
        if not group:
            return False
        self.batch = group
        found = None if group[0][1].compression else decode_columns_many(self.data, group)
        if found is not None:
            piece: Piece = (self.data, found[0], found[1])
        else:  # one by one: compressed, headers, long varints, or a damaged batch (which is named)
            parts = []
            for i, (pos, header) in enumerate(group):
                try:
                    if header.compression:
                        buf = records_section(self.data, header, pos)
                        c = decode_columns(header, buf, with_headers=True, empty_headers_as_none=True)
                    else:  # spans into the fetched buffer: no copy of the section
                        buf = self.data
                        c = decode_columns(header, buf, with_headers=True, empty_headers_as_none=True,
                                           start=pos + HEADER_SIZE, end=pos + header.size)
                except CorruptRecordError as exc:
                    self._fail(header, position, exc)
                    self.batch = group[:i]
                    break
                parts.append((buf, c, header.timestamp_type))
            if not parts:
                return False
            if len(parts) > 1:
                piece = _join_pieces(parts)
            else:
                piece = parts[0]
        c = piece[1]
        if len(c) and c.positions.offsets[0] < position:
            piece = take_piece(piece, c.positions.offsets >= position)
        self.cols = piece
        return True

    def exhausted(self) -> bool:
        return not self.batches and self.cols is None and self.index >= len(self.records)


@cache
def arrow_table_schema() -> pa.Schema:
    """The schema of what ``poll_arrow()`` returns: the Spark Kafka source's columns, headers included."""
    from shared.records.arrow import arrow_schema

    return arrow_schema(include_headers=True)


def _join_pieces(parts: list[Piece]) -> Piece:
    """Pieces of one buffer (uncompressed batches decoded one by one) as one."""
    ps = [c.positions for _, c, _ in parts]

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in ps])

    def nulls(name: str) -> np.ndarray | None:
        got = [getattr(p, name) for p in ps]
        if all(a is None for a in got):
            return None
        return np.concatenate([np.zeros(len(p), bool) if a is None else a for p, a in zip(ps, got, strict=True)])

    positions = RecordPositions(cat("offsets"), cat("timestamps"), cat("key_start"), cat("key_end"), nulls("key_null"),
                                cat("value_start"), cat("value_end"), nulls("value_null"))
    hs = [c.headers for _, c, _ in parts]
    headers = None if all(h is None for h in hs) else [
        x for (_, c, _), h in zip(parts, hs, strict=True) for x in (h if h is not None else [[]] * len(c))]
    types = np.concatenate([np.full(len(c), t, np.int32) if isinstance(t, int) else t for _, c, t in parts])
    return parts[0][0], Columns(parts[0][0], positions, headers), types


def _committed_only(data: bytes, batches: deque[tuple[int, BatchHeader]],
                    aborted: Iterable[tuple[int, int]]) -> deque[tuple[int, BatchHeader]]:
    """read_committed: the batches of committed (or non-transactional) records, as Kafka's consumer
    keeps them; aborted transactions' batches and every marker are left out."""
    keep = AbortedFilter(aborted)
    return deque((pos, h) for pos, h in batches
                 if keep.keep(h, marker_type(data, pos, h) if h.is_control else None))


#: A leader's fetch stream: pipelined gRPC, or Kafka's Fetch on the broker's Kafka listener
FetchStream = PipelinedFetchStream[dict[TopicPartition, int]] | KafkaFetchStream[dict[TopicPartition, int]]

#: How long a broker whose Kafka listener could not be reached is fetched from over gRPC instead
KAFKA_FALLBACK_S = 60.0
#: Kafka fetch requests one leader may have in flight, each for different partitions (``_pump_kafka``).
KAFKA_FETCHES_IN_FLIGHT = 2


class _LeaderFetch:
    """The consumer's fetch stream to one leader, and the partitions it has positioned there
    (partition -> the generation whose fetch position the broker holds for this stream; gRPC only)."""

    __slots__ = ("stream", "synced", "busy", "moving", "polling", "idle", "throttled_until", "reader")

    def __init__(self, stream: FetchStream) -> None:
        self.stream = stream
        self.reader: threading.Thread | None = None
        self.synced: dict[TopicPartition, int] = {}
        self.busy: set[TopicPartition] = set()  # Kafka: partitions in a request whose response is not filed
        self.moving: set[TopicPartition] = set()  # Kafka: partitions whose last response had records
        self.polling = False  # Kafka: the request in flight long-polls (it is then the only one)
        self.idle = False  # the last response carried no records: keep one fetch in flight, not fetch_depth
        self.throttled_until = 0.0  # the broker asked for a pause (throttle_time_ms, KIP-219)


class PartitionState:
    __slots__ = ("position", "fetch_position", "generation", "high_watermark", "log_start_offset", "buffered",
                 "paused", "leader_epoch")

    def __init__(self) -> None:
        self.position: int | None = None
        self.fetch_position: int | None = None
        self.generation = 0
        self.high_watermark = -1
        self.log_start_offset = -1
        self.buffered = 0
        self.paused = False
        self.leader_epoch = -1


class Consumer:
    """Kafka-style consumer with manual ``assign`` (group subscription is a later addition)."""

    def __init__(
        self,
        bootstrap_servers: str | Iterable[str],
        *,
        group_id: str | None = None,
        client_id: str = "tidelog-consumer",
        auto_offset_reset: str = "latest",
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 52_428_800,
        max_partition_fetch_bytes: int = 1_048_576,
        max_poll_records: int = 500,
        request_timeout_ms: int = 30_000,
        prefetch_bytes: int = 8 * 1_048_576,
        fetch_depth: int = 4,
        retry_backoff_ms: int = 100,
        group_instance_id: str | None = None,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 5000,
        max_poll_interval_ms: int = 300_000,
        group_remote_assignor: str | None = None,
        isolation_level: str = "read_uncommitted",
        security_protocol: str = "PLAINTEXT",
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        fetch_transport: str = "auto",
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError("auto_offset_reset must be 'earliest', 'latest' or 'none'")
        if isolation_level not in ISOLATION_LEVELS:
            raise ValueError("isolation_level must be 'read_uncommitted' or 'read_committed'")
        if fetch_transport not in ("auto", "grpc"):
            raise ValueError("fetch_transport must be 'auto' or 'grpc'")
        #: Kafka's isolation.level: read_committed reads up to the last stable offset, without aborted records
        self.isolation_level = isolation_level
        tune_allocator()
        tune_switch_interval()
        tune_gc()
        # kafka-python's security settings (PLAINTEXT: None, the plain channels as always)
        security = client_security(security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password,
                                   ssl_cafile, ssl_certfile, ssl_keyfile)
        self.cluster = ClusterClient(bootstrap_servers, client_id, request_timeout_ms, security=security)
        #: fetch_transport "auto": a plaintext consumer fetches records over a broker's Kafka listener
        #: when it has one (shared.client.kafka_fetch: a fifth of gRPC's receive cost); "grpc": always
        #: over gRPC. Everything else (metadata, groups, offsets) is gRPC either way.
        self.fetch_transport = "kafka" if fetch_transport == "auto" and security is None else "grpc"
        self._kafka_down: dict[int, float] = {}  # broker -> until when its Kafka listener is not tried
        self._kafka_warned: set[int] = set()  # brokers whose listener failure was logged as a warning
        self._silent: dict[int, float] = {}  # leader -> when its stream was closed for silence
        self.client_id = client_id
        self.throttled_responses = 0  # fetch responses that carried a throttle_time_ms
        #: Why the last fetch stream failed, until a fetch is answered again (None: no failure since); what
        #: a caller that gives up waiting (read_arrow's timeout) can say beside "timed out"
        self.fetch_failure: str | None = None
        self.stats = ConsumerStats()
        self.auto_offset_reset = auto_offset_reset
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.request_timeout_s = request_timeout_ms / 1000
        self.prefetch_bytes = prefetch_bytes
        self.fetch_depth = fetch_depth
        self.retry_backoff_s = retry_backoff_ms / 1000
        self._states: dict[TopicPartition, PartitionState] = {}
        self._completed: deque[Completed] = deque()
        self._current: _Cursor | None = None
        self._streams: dict[int, _LeaderFetch] = {}
        lock = threading.Lock()
        self._lock = threading.Condition(lock)  # poll() waits on it for records
        self._fetcher_wakeup = threading.Condition(lock)  # the fetcher thread waits on it
        self._closed = False
        self._fetcher: threading.Thread | None = None
        self._pending_error: BaseException | None = None
        # What _pump (lock held, no network) found missing; the fetcher thread dials and refreshes
        # metadata for it without the lock.
        self._wanted_leaders: set[int] = set()
        self._metadata_wanted = False
        # Consumer groups (shared.client.group_member). With the consumer protocol (KIP-848) the
        # coordinator decides the session timeout and heartbeat interval, as in Kafka 4.0:
        # session_timeout_ms is accepted for compatibility, heartbeat_interval_ms is used until
        # the coordinator's first answer.
        self._group: GroupMember | None = None
        if group_id is not None:
            self._group = GroupMember(
                self, group_id, group_instance_id=group_instance_id, enable_auto_commit=enable_auto_commit,
                auto_commit_interval_ms=auto_commit_interval_ms, heartbeat_interval_ms=heartbeat_interval_ms,
                max_poll_interval_ms=max_poll_interval_ms, group_remote_assignor=group_remote_assignor,
                client_id=client_id, request_timeout_s=request_timeout_ms / 1000)
        self.session_timeout_ms = session_timeout_ms

    # -- consumer groups (see shared.client.group_member) -----------------------------------------

    def _member(self) -> GroupMember:
        if self._group is None:
            raise RuntimeError("this consumer has no group_id")
        return self._group

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group membership a transactional producer's ``send_offsets_to_transaction`` passes on
        (Kafka's ``ConsumerGroupMetadata``): group id, member epoch as generation, member id, instance id."""
        m = self._member()
        member_id, epoch = m.member_id, m.epoch
        return ConsumerGroupMetadata(m.group_id, epoch if member_id else -1, member_id, m.instance_id)

    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: str | None = None,
                  listener: ConsumerRebalanceListener | None = None) -> None:
        """Join the group for ``topics`` or the topics matching ``pattern`` (a full-match regex)."""
        self._member().subscribe(topics, pattern, listener)

    def unsubscribe(self) -> None:
        self._member().unsubscribe()

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (default: the position of every assigned partition); returns once committed."""
        self._member().commit(offsets)

    def commit_async(self, offsets: dict[TopicPartition, int] | None = None,
                     callback: Callable[[dict[TopicPartition, int], Exception | None], None] | None = None) -> None:
        self._member().commit_async(offsets, callback)

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        return self._member().committed(partitions)

    # -- assignment and positions -----------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        tps = [TopicPartition(*tp) for tp in partitions]
        for tp in tps:
            parts = self.cluster.partitions_for(tp.topic, 10)
            if tp.partition not in parts:
                raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp} does not exist")
        with self._lock:
            self._states = {tp: self._states.get(tp) or PartitionState() for tp in tps}
            self._completed = deque(c for c in self._completed if c.tp in self._states)
            self._current = None
            self._lock.notify_all()
            self._fetcher_wakeup.notify()
        self._ensure_fetcher()

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    def _state(self, tp: TopicPartition) -> PartitionState:
        st = self._states.get(tp)
        if st is None:
            raise ValueError(f"{tp} is not assigned to this consumer")
        return st

    def seek(self, partition: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise ValueError("offset must be >= 0")
        with self._lock:
            st = self._state(TopicPartition(*partition))
            self._set_position(TopicPartition(*partition), st, offset)

    def _set_position(self, tp: TopicPartition, st: PartitionState, offset: int) -> None:
        err = self._pending_error
        if isinstance(err, UnreadableBatchError) and (err.topic, err.partition) == tp:
            self._pending_error = None  # the application moved on from the batch it names
        st.position = offset
        st.fetch_position = offset
        st.generation += 1
        st.buffered = 0
        self._completed = deque(c for c in self._completed if c.tp != tp)
        if self._current is not None and self._current.tp == tp:
            self._current = None
        self._lock.notify_all()
        self._fetcher_wakeup.notify()

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._seek_to(partitions or tuple(self._states), EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._seek_to(partitions or tuple(self._states), LATEST)

    def _seek_to(self, partitions: Iterable[TopicPartition], which: int) -> None:
        tps = [TopicPartition(*tp) for tp in partitions]
        offsets = self._list_offsets({tp: which for tp in tps})
        with self._lock:
            for tp, off in offsets.items():
                self._set_position(tp, self._state(tp), off)

    def position(self, partition: TopicPartition) -> int:
        tp = TopicPartition(*partition)
        st = self._state(tp)
        if st.position is None:
            self._reset_positions([tp])
        assert st.position is not None
        return st.position

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list_offsets({TopicPartition(*tp): EARLIEST for tp in partitions})

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list_offsets({TopicPartition(*tp): LATEST for tp in partitions})

    def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int] | None]:
        raw = self._list_offsets(timestamps, with_timestamp=True)
        return {tp: (v if v[0] >= 0 else None) for tp, v in raw.items()}  # type: ignore[misc]

    def _list_offsets(self, wanted: dict[TopicPartition, int], with_timestamp: bool = False) -> dict[TopicPartition, object]:
        out: dict[TopicPartition, object] = {}
        pending = dict(wanted)
        deadline = time.monotonic() + self.request_timeout_s
        while pending:
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in pending:
                by_leader.setdefault(self.cluster.leader_for(tp), []).append(tp)
            retry = False
            for leader, tps in by_leader.items():
                topics: dict[str, list[pb.ListOffsetsPartition]] = {}
                for tp in tps:
                    topics.setdefault(tp.topic, []).append(pb.ListOffsetsPartition(partition=tp.partition, timestamp=pending[tp]))
                req = pb.ListOffsetsRequest(replica_id=-1, isolation_level=ISOLATION_LEVELS[self.isolation_level],
                                            topics=[pb.ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()])
                try:
                    resp = self.cluster.broker_stub(leader).ListOffsets(req, timeout=self.request_timeout_s)
                except (grpc.RpcError, TidelogError):
                    retry = True
                    continue
                for t in resp.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition)
                        if p.error_code:
                            err = error_for(p.error_code, p.error_message)
                            if not err.retriable:
                                raise err
                            retry = True
                            continue
                        out[tp] = (p.offset, p.timestamp) if with_timestamp else p.offset
                        pending.pop(tp, None)
            if pending and retry:
                if time.monotonic() > deadline:
                    raise TidelogError(f"ListOffsets for {sorted(pending)} did not succeed in time", code=ErrorCode.REQUEST_TIMED_OUT)
                self.cluster.refresh()
                time.sleep(self.retry_backoff_s)
        return out

    def _reset_positions(self, tps: list[TopicPartition]) -> None:
        if self.auto_offset_reset == "none":
            raise OffsetOutOfRangeError(f"no position for {tps} and auto_offset_reset='none'")
        which = EARLIEST if self.auto_offset_reset == "earliest" else LATEST
        offsets = self._list_offsets({tp: which for tp in tps})
        with self._lock:
            for tp, off in offsets.items():
                st = self._states.get(tp)
                if st is not None:
                    self._set_position(tp, st, int(off))  # type: ignore[arg-type]

    # -- polling ---------------------------------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        """Kafka's consumer figures: fetch-rate, bytes-consumed-rate, records-lag-max (high watermark − position)."""
        with self._lock:
            lags = [st.high_watermark - st.position for st in self._states.values()
                    if st.position is not None and st.high_watermark >= 0]
            return self.stats.snapshot(lags)

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> ConsumerRecords:
        """Records after each assigned partition's position, up to ``max_records`` (default ``max_poll_records``)."""
        if self._closed:
            raise RuntimeError("consumer is closed")
        if self._group is not None:
            self._group.on_poll()
        limit = max_records or self.max_poll_records
        need_reset = [tp for tp, st in self._states.items() if st.position is None]
        if need_reset:
            self._reset_positions(need_reset)
        deadline = time.monotonic() + timeout_ms / 1000
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        n = 0
        while n < limit:
            cur = self._current
            if cur is None:
                with self._lock:
                    if n and self._pending_error is not None:  # records first, the error on the next poll
                        return ConsumerRecords(out)
                    self._raise_pending()
                    while not self._completed:
                        remaining = deadline - time.monotonic()
                        if n or remaining <= 0:
                            return ConsumerRecords(out)
                        self._lock.wait(remaining)
                        self._raise_pending()
                    completed = self._completed.popleft()
                cur = self._take(completed, bool(n))
                if cur is _LATER:
                    return ConsumerRecords(out)
                self._current = cur
                continue
            st = self._states.get(cur.tp)
            if st is None or st.generation != cur.generation:
                self._current = None
                continue
            recs = cur.records
            if cur.index >= len(recs):
                if not cur.decode_next(st.position):  # type: ignore[arg-type]
                    self._current = None
                    if cur.error is not None:
                        return self._unreadable(cur.error, st, out)
                    # Past control records and compacted-away offsets at the end too, as Kafka does.
                    st.position = max(st.position or 0, cur.end)
                continue
            take = min(limit - n, len(recs) - cur.index)
            if take == len(recs):  # the whole batch: hand its list out as is (the cursor lets go of it)
                part = recs
                cur.records = []
            else:
                part = recs[cur.index:cur.index + take]
                cur.index += take
            lst = out.get(cur.tp)
            if lst is None:
                lst = out[cur.tp] = part
            else:
                lst.extend(part)
            n += take
            st.position = lst[-1].offset + 1
        return ConsumerRecords(out)

    def poll_arrow(self, timeout_ms: int = 0, max_records: int | None = None) -> pa.Table:
        """Records after each assigned partition's position as one Arrow table, up to ``max_records``
        (default: every record already fetched, which ``prefetch_bytes`` bounds).

        The columns are the Spark Kafka source's, headers included (``shared.records.arrow.arrow_schema``):
        key, value, topic, partition, offset, timestamp (µs, UTC), timestampType, headers. They are cut
        from the fetched batches without a Python object per record; the table has one chunk per
        fetched response and partition (``to_batches()`` gives them). Positions, commits, read_committed,
        corrupt batches and group membership work as with ``poll``, and the two can be mixed.
        """
        import pyarrow as pa

        from shared.records.arrow import record_batch

        schema = arrow_table_schema()
        if self._closed:
            raise RuntimeError("consumer is closed")
        if max_records is not None and max_records < 1:
            raise ValueError("max_records must be >= 1")
        if self._group is not None:
            self._group.on_poll()
        limit = max_records or (1 << 62)
        need_reset = [tp for tp, st in self._states.items() if st.position is None]
        if need_reset:
            self._reset_positions(need_reset)
        deadline = time.monotonic() + timeout_ms / 1000
        out: list[pa.RecordBatch] = []
        n = 0
        while n < limit:
            cur = self._current
            if cur is None:
                with self._lock:
                    if n and self._pending_error is not None:  # records first, the error on the next poll
                        return pa.Table.from_batches(out, schema)
                    self._raise_pending()
                    while not self._completed:
                        remaining = deadline - time.monotonic()
                        if n or remaining <= 0:
                            return pa.Table.from_batches(out, schema)
                        self._lock.wait(remaining)
                        self._raise_pending()
                    completed = self._completed.popleft()
                cur = self._take(completed, bool(n))
                if cur is _LATER:
                    return pa.Table.from_batches(out, schema)
                self._current = cur
                continue
            st = self._states.get(cur.tp)
            if st is None or st.generation != cur.generation or st.position is None:
                self._current = None
                continue
            pieces = cur.next_columns(st.position, limit - n)
            if pieces:
                batch = record_batch(pieces, cur.tp.topic, cur.tp.partition, schema)
                out.append(batch)
                n += batch.num_rows
                st.position = int(pieces[-1][1].positions.offsets[-1]) + 1
            if cur.exhausted():
                self._current = None
                if cur.error is not None:
                    self._flag_unreadable(cur.error, st, bool(out))
                    return pa.Table.from_batches(out, schema)
                # Past control records and compacted-away offsets at the end too, as Kafka does.
                st.position = max(st.position, cur.end)
        return pa.Table.from_batches(out, schema)

    def _flag_unreadable(self, err: UnreadableBatchError, st: PartitionState, have: bool) -> None:
        """``_unreadable`` for poll_arrow: position at the bad batch; raise now unless records go out first."""
        tp = TopicPartition(err.topic, err.partition)
        with self._lock:
            self._set_position(tp, st, max(st.position or 0, err.offset))
            if have:
                self._pending_error = err
                return
        raise err

    def _unreadable(self, err: UnreadableBatchError, st: PartitionState,
                    out: dict[TopicPartition, list[ConsumerRecord]]) -> ConsumerRecords:
        """A batch that cannot be decoded: the records before it are returned first, then the error is
        raised (by this poll when it has none), naming topic, partition and offset. The position stays
        at that batch, so every poll raises again until the application seeks past it (as Kafka's consumer)."""
        tp = TopicPartition(err.topic, err.partition)
        with self._lock:
            self._set_position(tp, st, max(st.position or 0, err.offset))
            if out:
                self._pending_error = err
                return ConsumerRecords(out)
        raise err

    def _raise_pending(self) -> None:
        if self._pending_error is not None:
            err, self._pending_error = self._pending_error, None
            raise err

    def _take(self, c: Completed, have: bool = False) -> _Cursor | None:
        """Check a completed fetch's batches; they are decoded one at a time as poll() needs them.

        ``have``: the poll has taken records already. An out-of-range fetch is then put back and ``_LATER``
        returned, so that the poll returns them and the next poll raises (or resets) for it, as Kafka's
        consumer throws only when it has collected nothing; a seek or a new assignment in between drops it
        (its generation or partition is gone)."""
        st = self._states.get(c.tp)
        with self._lock:
            if st is not None:
                st.buffered = max(st.buffered - (c.end - c.start), 0)
                self._pump()  # the freed room may let more fetches go out
        if st is None or st.generation != c.generation or st.position is None:
            return None
        if c.error:
            if c.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                if have:
                    with self._lock:
                        self._completed.appendleft(c)
                    return _LATER
                if self.auto_offset_reset == "none":
                    raise OffsetOutOfRangeError(f"{c.tp}: offset {c.fetch_offset} out of range")
                self._reset_positions([c.tp])
            return None
        st.high_watermark = c.high_watermark
        st.log_start_offset = c.log_start_offset
        batches: deque[tuple[int, BatchHeader]] = deque()
        error = None
        try:
            batches.extend(iter_batches(c.data, validate=True, start=c.start, end=c.end))
        except CorruptRecordError as exc:  # hand out the valid batches before it, then raise
            bad = batches[-1][1].next_offset if batches else c.fetch_offset
            error = UnreadableBatchError(c.tp.topic, c.tp.partition, max(bad, st.position), exc.args[0])
        end = batches[-1][1].next_offset if batches else 0
        if self.isolation_level == "read_committed" and batches:
            batches = _committed_only(c.data, batches, c.aborted or ())
        if error is not None or end > st.position:
            return _Cursor(c.tp, c.generation, c.data, batches, error, end)
        return None

    # -- fetcher ------------------------------------------------------------------------------------------

    def _ensure_fetcher(self) -> None:
        if self._fetcher is None:
            self._fetcher = threading.Thread(target=self._fetch_loop, name="tidelog-consumer-fetcher", daemon=True)
            self._fetcher.start()

    def _fetchable(self) -> dict[int, list[tuple[TopicPartition, PartitionState]]]:
        """Partitions to fetch now, by leader, from the metadata at hand (lock held: no network call;
        a partition without metadata asks the fetcher thread for a refresh)."""
        by_leader: dict[int, list[tuple[TopicPartition, PartitionState]]] = {}
        topics = self.cluster.snapshot.topics
        for tp, st in self._states.items():
            if st.fetch_position is None or st.paused or st.buffered >= self.prefetch_bytes:
                continue
            info = (topics.get(tp.topic) or {}).get(tp.partition)
            if info is None:
                self._metadata_wanted = True
                self._fetcher_wakeup.notify()
                continue
            by_leader.setdefault(info.leader, []).append((tp, st))
        return by_leader

    def _fetch_loop(self) -> None:
        """Keep each leader's stream busy; woken by responses, poll(), seek and assign. The lock is
        never held across a network call: what ``_pump`` found missing (a broker's channel, metadata)
        is dialled or refreshed here, between two turns holding the lock."""
        while not self._closed:
            with self._lock:
                leaders, self._wanted_leaders = self._wanted_leaders, set()
                refresh, self._metadata_wanted = self._metadata_wanted, False
            if leaders or refresh:
                self._connect(leaders, refresh)
            with self._lock:
                self._pump()
                missing = self._wanted_leaders or self._metadata_wanted
                self._fetcher_wakeup.wait(self.retry_backoff_s if missing else self._pause_s())
        with self._lock:
            for lf in self._streams.values():
                lf.stream.close()
            self._streams.clear()

    def _connect(self, leaders: set[int], refresh: bool) -> None:
        """Dial the leaders ``_pump`` has no channel for, refresh metadata if asked (without the lock)."""
        for leader in leaders:
            try:
                self.cluster.broker_stub(leader)  # a TCP probe, then the channel is kept
            except TidelogError as exc:
                self.fetch_failure = f"cannot connect to broker {leader}: {exc}"
                refresh = True
        if refresh:
            self._refresh_rate_limited()

    def _pause_s(self) -> float:
        """How long the fetcher may sleep: 0.1 s, or until the first throttle pause ends."""
        ends = [lf.throttled_until for lf in self._streams.values() if lf.throttled_until]
        return max(0.001, min([0.1, *(t - time.monotonic() for t in ends)]))

    def _pump(self) -> None:
        """Send what each leader's stream may take now (caller holds the lock). No network call here:
        a leader without a channel yet is left to the fetcher thread (``_connect``). Nothing once closed:
        a stream's reader may still hand in a last response after ``close()`` closed the channels."""
        if self._closed:
            return
        stale = self.request_timeout_s + self.fetch_max_wait_ms / 1000
        now = time.monotonic()
        for leader, lf in list(self._streams.items()):
            if lf.stream.closed:
                del self._streams[leader]
            elif self._kafka_down.get(leader, now + 1) <= now and not isinstance(lf.stream, KafkaFetchStream):
                del self._kafka_down[leader]  # the fallback is over: try the Kafka listener again
                lf.stream.close()  # (what it had in flight is dropped: positions move only as responses are filed)
                del self._streams[leader]
            elif lf.stream.in_flight and now - lf.stream.last_activity > stale:
                log.debug("fetch stream to broker %d is silent; reopening", leader)
                lf.stream.close()  # e.g. a paused broker; the reader thread ends
                del self._streams[leader]
                # As Kafka's consumer after a request timeout: ask for metadata again. A paused leader
                # has usually been replaced by now, and its socket still accepts connections, so
                # without this the consumer would keep fetching from it until metadata.max.age.ms.
                self._metadata_wanted = True
                self._silent[leader] = now  # not dialled again before that metadata has come
                self._fetcher_wakeup.notify()
        for leader, parts in self._fetchable().items():
            if leader < 0:
                continue
            lf = self._streams.get(leader)
            if lf is not None and lf.throttled_until > now:
                continue  # over a quota on that broker: send it nothing until the pause ends
            if lf is None:
                if self._silent.get(leader, -1.0) >= self.cluster.snapshot.fetched_at:
                    self._metadata_wanted = True  # this leader went silent since the last metadata: refresh
                    self._fetcher_wakeup.notify()  # first (the fetcher thread, rate-limited)
                    continue
                stream = self._new_stream(leader, now)
                if stream is None:
                    self._wanted_leaders.add(leader)
                    self._fetcher_wakeup.notify()
                    continue
                lf = self._streams[leader] = _LeaderFetch(stream)
                lf.reader = threading.Thread(target=self._read_stream, args=(lf,),
                                             name=f"tidelog-consumer-stream-{leader}", daemon=True)
                lf.reader.start()
            if not lf.stream.pipelined:
                self._pump_kafka(lf, parts)
                continue
            if any(lf.synced.get(tp) != st.generation for tp, st in parts):
                if lf.stream.in_flight:
                    continue  # let the stream drain, then position it exactly
                lf.synced = {tp: st.generation for tp, st in parts}
                self._send(lf, parts, incremental=False)
                continue
            ahead = lf.stream.in_flight * self.max_partition_fetch_bytes
            depth = 1 if lf.idle else self.fetch_depth  # caught up: no point in asking ahead
            while lf.stream.in_flight < depth and all(
                    st.buffered + ahead < self.prefetch_bytes for _, st in parts):
                # Only the first fetch in flight long-polls; the ones behind it answer at once, so
                # no more than one max_wait is ever queued on the stream (a seek drains it fast).
                self._send(lf, parts, incremental=True, max_wait_ms=0 if lf.stream.in_flight else None)
                ahead += self.max_partition_fetch_bytes

    def _pump_kafka(self, lf: _LeaderFetch, parts: list[tuple[TopicPartition, PartitionState]]) -> None:
        """Kafka's Fetch names each partition's exact position, so a partition is in one request at a time
        and its next fetch goes out as its response is filed (_handle_fetch pumps), while poll() decodes.

        While two or more free partitions of this leader had records in their last response (``moving``),
        they are split between two requests in flight (the quiet ones ride with the first), so the broker
        reads one while the other crosses the socket: otherwise one request's read, send and receive follow
        each other. Those requests do not long-poll, because the broker answers a connection's requests
        one at a time and a request waiting for records would hold up the other. A partition freed while one
        of them is out follows in a request of its own, as long as it was moving. Otherwise one request at
        a time long-polls for all the free partitions, as Kafka's consumer does, and nothing is sent beside
        it (``polling``): a partition freed meanwhile waits for its answer. A partition with
        ``prefetch_bytes`` buffered waits for poll()."""
        free = [(tp, st) for tp, st in parts if tp not in lf.busy and st.buffered < self.prefetch_bytes]
        if not free or lf.stream.in_flight >= KAFKA_FETCHES_IN_FLIGHT:
            return
        moving = [(tp, st) for tp, st in free if tp in lf.moving]
        if lf.busy:
            if moving and not lf.polling:
                self._send(lf, free, incremental=False, max_wait_ms=0)
        elif len(moving) > 1:
            quiet = [(tp, st) for tp, st in free if tp not in lf.moving]
            self._send(lf, moving[::2] + quiet, incremental=False, max_wait_ms=0)
            self._send(lf, moving[1::2], incremental=False, max_wait_ms=0)
        else:
            self._send(lf, free, incremental=False)

    def _new_stream(self, leader: int, now: float) -> FetchStream | None:
        """A fetch stream to ``leader`` (lock held: nothing is dialled here), or None until the fetcher
        thread has a gRPC channel to it. The Kafka stream connects in its reader thread."""
        kafka = self.cluster.snapshot.kafka.get(leader) if self.fetch_transport == "kafka" else None
        if kafka and self._kafka_down.get(leader, 0.0) <= now:
            return KafkaFetchStream(kafka, leader, self.client_id, min(self.request_timeout_s, 10.0),
                                    2 * self.fetch_max_bytes + (16 << 20))  # KIP-74: one batch may exceed it
        stub = self.cluster.connected_stub(leader)
        return None if stub is None else PipelinedFetchStream(stub, leader)

    def _send(self, lf: _LeaderFetch, parts: list[tuple[TopicPartition, PartitionState]], incremental: bool,
              max_wait_ms: int | None = None) -> None:
        wait = self.fetch_max_wait_ms if max_wait_ms is None else max_wait_ms
        if isinstance(lf.stream, KafkaFetchStream):
            lf.busy.update(tp for tp, _ in parts)
            lf.polling = wait > 0
            lf.stream.fetch([(tp, st.fetch_position or 0) for tp, st in parts], {tp: st.generation for tp, st in parts},
                            max_wait_ms=wait, min_bytes=self.fetch_min_bytes, max_bytes=self.fetch_max_bytes,
                            partition_max_bytes=self.max_partition_fetch_bytes,
                            isolation_level=ISOLATION_LEVELS[self.isolation_level])
            return
        req = fetch_request(((tp, st.fetch_position or 0) for tp, st in parts), max_wait_ms=wait,
                            min_bytes=self.fetch_min_bytes, max_bytes=self.fetch_max_bytes,
                            partition_max_bytes=self.max_partition_fetch_bytes, incremental=incremental,
                            client_id=self.client_id, isolation_level=ISOLATION_LEVELS[self.isolation_level])
        lf.stream.send(req, {tp: st.generation for tp, st in parts})

    def _read_stream(self, lf: _LeaderFetch) -> None:
        try:
            if isinstance(lf.stream, KafkaFetchStream):
                lf.stream.connect()
            while not self._closed and not lf.stream.closed:
                resp, sent = lf.stream.receive()
                self._handle_fetch(lf, resp, sent)
        except (grpc.RpcError, StopIteration, KafkaFetchError) as exc:
            forget_traceback(exc)
            code = exc.code() if isinstance(exc, grpc.RpcError) else None
            if isinstance(exc, KafkaFetchError):  # as a gRPC call: cancelled by close(), else failed
                code = grpc.StatusCode.CANCELLED if lf.stream.closed else grpc.StatusCode.UNAVAILABLE
                if code == grpc.StatusCode.UNAVAILABLE:
                    self._kafka_failed(lf, exc)
            with self._lock:
                if self._streams.get(lf.stream.broker) is lf:
                    del self._streams[lf.stream.broker]
                lf.stream.close()
                self._fetcher_wakeup.notify()
            if self._closed or code == grpc.StatusCode.CANCELLED:
                return
            self.fetch_failure = f"fetching from broker {lf.stream.broker} failed: {exc}"
            log.debug("fetch stream to broker %d failed: %s", lf.stream.broker, code)
            if code == grpc.StatusCode.UNAVAILABLE:
                for addr in list(self.cluster.snapshot.brokers.values()):
                    if not tcp_reachable(addr):
                        self.cluster.forget(addr)
            self._refresh_soon()

    def _kafka_failed(self, lf: _LeaderFetch, exc: KafkaFetchError) -> None:
        """A Kafka fetch stream failed (reader thread, no lock). If it never got an answer while the
        broker's gRPC door does answer, the listener is what fails (a port not published, a listener that
        drops connections): fetch from that broker over gRPC for ``KAFKA_FALLBACK_S``. A broker that is
        down altogether is left to the usual retries."""
        stream = lf.stream
        if not isinstance(stream, KafkaFetchStream) or stream.answered:
            return
        address = self.cluster.snapshot.brokers.get(stream.broker)
        if address is None or not tcp_reachable(address):
            return
        (log.debug if stream.broker in self._kafka_warned else log.warning)(  # warned once per broker
            "fetching from broker %d over gRPC for %.0f s: %s", stream.broker, KAFKA_FALLBACK_S, exc)
        with self._lock:
            self._kafka_warned.add(stream.broker)
            self._kafka_down[stream.broker] = time.monotonic() + KAFKA_FALLBACK_S

    def _handle_fetch(self, lf: _LeaderFetch, resp: FetchResponseView | KafkaFetchResponse,
                      sent: dict[TopicPartition, int]) -> None:
        refresh = False
        self.fetch_failure = None
        with self._lock:
            if isinstance(lf.stream, KafkaFetchStream):
                lf.stream.done()  # filed below, under this lock: the next fetch may be sent
                lf.busy.difference_update(sent)
                lf.polling = False  # a long-poll is the only request in flight: this was its answer
                lf.moving.difference_update(sent)
                lf.moving.update(TopicPartition(t.name, p.partition) for t in resp.topics for p in t.partitions
                                 if p.next_offset > p.fetch_offset and not p.error_code)
            if resp.throttle_time_ms > 0:
                lf.throttled_until = time.monotonic() + resp.throttle_time_ms / 1000
                self.throttled_responses += 1
            lf.idle = all(p.next_offset <= p.fetch_offset for t in resp.topics for p in t.partitions)
            self.stats.fetched(sum(p.records_size for t in resp.topics for p in t.partitions))
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition)
                    st = self._states.get(tp)
                    gen = sent.get(tp)
                    if st is None or gen is None or st.generation != gen:
                        continue
                    if p.error_code:
                        lf.synced.pop(tp, None)  # the broker dropped its position for it
                        err = error_for(p.error_code, p.error_message)
                        if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                            self._completed.append(Completed(tp, gen, st.fetch_position or 0, b"", 0, 0, -1, -1,
                                                             p.error_code, p.error_message))
                            st.fetch_position = None  # wait for poll() to reset the position
                        elif err.retriable:
                            refresh = True
                        else:
                            self._pending_error = err
                        continue
                    if p.fetch_offset != st.fetch_position:
                        lf.synced.pop(tp, None)  # out of step (e.g. leadership moved away and back): resync
                        continue
                    st.high_watermark = p.high_watermark
                    if p.next_offset > p.fetch_offset:
                        st.fetch_position = p.next_offset
                        st.buffered += p.records_size
                        self._completed.append(Completed(tp, gen, p.fetch_offset, p.buf, p.records_start,
                                                         p.records_end, p.high_watermark, p.log_start_offset,
                                                         aborted=p.aborted_transactions))
            self._pump()  # this stream has room for another fetch now (the reader sends it: no thread hop)
            self._lock.notify_all()
        if refresh:
            self._refresh_soon()

    _last_refresh = 0.0

    def _refresh_rate_limited(self) -> None:
        if time.monotonic() - self._last_refresh > 0.5:
            self._last_refresh = time.monotonic()
            try:
                self.cluster.refresh()
            except TidelogError as exc:
                self.fetch_failure = f"metadata: {exc}"

    def _refresh_soon(self) -> None:
        time.sleep(self.retry_backoff_s)
        try:
            self.cluster.refresh()
        except TidelogError as exc:
            log.debug("metadata refresh failed: %s", exc)

    def highwater(self, partition: TopicPartition) -> int:
        return self._state(TopicPartition(*partition)).high_watermark

    def close(self) -> None:
        if self._group is not None and not self._closed:
            self._group.close()
        self._closed = True
        with self._lock:
            readers = [lf.reader for lf in self._streams.values() if lf.reader is not None]
            for lf in self._streams.values():
                lf.stream.close()
            self._lock.notify_all()
            self._fetcher_wakeup.notify()
        if self._fetcher is not None:
            self._fetcher.join(timeout=5)
        for reader in readers:  # each frees its call as it ends (see shared.client.grpc_calls)
            reader.join(timeout=2)
        self.cluster.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
