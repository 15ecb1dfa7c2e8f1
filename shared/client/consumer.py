"""The consumer: manual assignment, positions, and a fetcher thread that prefetches.

The fetcher thread keeps one fetch in flight per leader broker for the
assigned partitions, at each partition's *fetch position* (which runs ahead of
the application's position). Completed fetches wait, still as raw batches, in
a bounded buffer; ``poll()`` decodes them in the caller's thread, drops
records before the position (a batch can start earlier) and control records,
and advances the position. ``seek`` bumps a per-partition generation so stale
prefetched data is discarded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import grpc

from shared.client.cluster import ClusterClient
from shared.errors import ErrorCode, OffsetOutOfRangeError, TidelogError, error_for
from shared.netprobe import tcp_reachable
from shared.proto import tidelog_pb2 as pb
from shared.records.batch import Record, decode_records, iter_batches, records_section
from shared.runtime import tune_allocator
from shared.types import TopicPartition

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1


class ConsumerRecord(Record):
    """A record as the consumer returns it: ``topic, partition, offset, timestamp, timestamp_type, key, value, headers``.

    ``topic``, ``partition`` and ``timestamp_type`` are attributes of a small
    subclass made once per partition, so decoding creates one object per record.
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
        for recs in self.by_partition.values():
            yield from recs

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
    tp: TopicPartition
    generation: int
    fetch_offset: int
    data: bytes
    high_watermark: int
    log_start_offset: int
    error: int = 0
    message: str = ""


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
        retry_backoff_ms: int = 100,
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError("auto_offset_reset must be 'earliest', 'latest' or 'none'")
        if group_id is not None:
            raise NotImplementedError("consumer groups (group_id / subscribe) are not supported yet; use assign()")
        tune_allocator()
        self.cluster = ClusterClient(bootstrap_servers, client_id, request_timeout_ms)
        self.client_id = client_id
        self.auto_offset_reset = auto_offset_reset
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.request_timeout_s = request_timeout_ms / 1000
        self.prefetch_bytes = prefetch_bytes
        self.retry_backoff_s = retry_backoff_ms / 1000
        self._states: dict[TopicPartition, PartitionState] = {}
        self._completed: deque[Completed] = deque()
        self._current: tuple[TopicPartition, int, deque[ConsumerRecord]] | None = None
        self._lock = threading.Condition(threading.Lock())
        self._closed = False
        self._fetcher: threading.Thread | None = None
        self._pending_error: BaseException | None = None

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
        st.position = offset
        st.fetch_position = offset
        st.generation += 1
        st.buffered = 0
        self._completed = deque(c for c in self._completed if c.tp != tp)
        if self._current is not None and self._current[0] == tp:
            self._current = None
        self._lock.notify_all()

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
                req = pb.ListOffsetsRequest(replica_id=-1, topics=[pb.ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()])
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

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> ConsumerRecords:
        """Records after each assigned partition's position, up to ``max_records`` (default ``max_poll_records``)."""
        if self._closed:
            raise RuntimeError("consumer is closed")
        limit = max_records or self.max_poll_records
        need_reset = [tp for tp, st in self._states.items() if st.position is None]
        if need_reset:
            self._reset_positions(need_reset)
        deadline = time.monotonic() + timeout_ms / 1000
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        n = 0
        while n < limit:
            with self._lock:
                if self._pending_error is not None:
                    err, self._pending_error = self._pending_error, None
                    raise err
                if self._current is None or not self._current[2]:
                    self._current = None
                    while not self._completed:
                        remaining = deadline - time.monotonic()
                        if n or remaining <= 0:
                            return ConsumerRecords(out)
                        self._lock.wait(remaining)
                        if self._pending_error is not None:
                            err, self._pending_error = self._pending_error, None
                            raise err
                    completed = self._completed.popleft()
                else:
                    completed = None
            if completed is not None:
                self._current = self._take(completed)
                continue
            tp, gen, recs = self._current  # type: ignore[misc]
            st = self._states.get(tp)
            if st is None or st.generation != gen:
                self._current = None
                continue
            lst = out.setdefault(tp, [])
            take = min(limit - n, len(recs))
            for _ in range(take):
                lst.append(recs.popleft())
            n += take
            st.position = lst[-1].offset + 1
        return ConsumerRecords(out)

    def _take(self, c: Completed) -> tuple[TopicPartition, int, deque[ConsumerRecord]] | None:
        """Decode a completed fetch into records at or after the position (caller thread, no lock)."""
        st = self._states.get(c.tp)
        with self._lock:
            if st is not None:
                st.buffered = max(st.buffered - len(c.data), 0)
                self._lock.notify_all()
        if st is None or st.generation != c.generation or st.position is None:
            return None
        if c.error:
            if c.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                if self.auto_offset_reset == "none":
                    self._pending_error = OffsetOutOfRangeError(f"{c.tp}: offset {c.fetch_offset} out of range")
                    return None
                self._reset_positions([c.tp])
            return None
        st.high_watermark = c.high_watermark
        st.log_start_offset = c.log_start_offset
        topic, partition = c.tp
        position = st.position
        recs: deque[ConsumerRecord] = deque()
        last_next = position
        for pos, header in iter_batches(c.data, validate=True):
            last_next = header.next_offset
            if header.is_control or header.last_offset < position:
                continue
            cls = record_class(topic, partition, header.timestamp_type)
            decoded = decode_records(header, records_section(c.data, header, pos), cls)
            if header.base_offset < position:
                decoded = [r for r in decoded if r.offset >= position]
            recs.extend(decoded)  # type: ignore[arg-type]
        if not recs:
            if last_next > position:  # only control records or compacted gaps: move past them
                st.position = last_next
            return None
        return c.tp, c.generation, recs

    # -- fetcher thread ------------------------------------------------------------------------------------

    def _ensure_fetcher(self) -> None:
        if self._fetcher is None:
            self._fetcher = threading.Thread(target=self._fetch_loop, name="tidelog-consumer-fetcher", daemon=True)
            self._fetcher.start()

    def _fetchable(self) -> dict[int, list[tuple[TopicPartition, PartitionState]]]:
        by_leader: dict[int, list[tuple[TopicPartition, PartitionState]]] = {}
        for tp, st in self._states.items():
            if st.fetch_position is None or st.paused or st.buffered >= self.prefetch_bytes:
                continue
            try:
                leader = self.cluster.leader_for(tp)
            except TidelogError:
                continue
            by_leader.setdefault(leader, []).append((tp, st))
        return by_leader

    def _fetch_loop(self) -> None:
        inflight: dict[int, tuple[grpc.Future, dict[TopicPartition, tuple[int, int]]]] = {}
        while not self._closed:
            with self._lock:
                by_leader = self._fetchable() if not self._closed else {}
                for leader, parts in by_leader.items():
                    if leader in inflight or leader < 0:
                        continue
                    req, meta = self._build_fetch(parts)
                    try:
                        fut = self.cluster.broker_stub(leader).Fetch.future(req, timeout=self.request_timeout_s + self.fetch_max_wait_ms / 1000)
                    except TidelogError:
                        self._refresh_rate_limited()
                        continue
                    inflight[leader] = (fut, meta)
                if not inflight:
                    self._lock.wait(0.05)
                    continue
            done = self._wait_any([f for f, _ in inflight.values()], 0.05)
            for leader in [lid for lid, (f, _) in inflight.items() if f in done]:
                fut, meta = inflight.pop(leader)
                self._handle_fetch(fut, meta)

    @staticmethod
    def _wait_any(futures: list[grpc.Future], timeout: float) -> set[grpc.Future]:
        ev = threading.Event()
        for f in futures:
            f.add_done_callback(lambda _f: ev.set())
        ev.wait(timeout)
        return {f for f in futures if f.done()}

    def _build_fetch(self, parts: list[tuple[TopicPartition, PartitionState]]) -> tuple[pb.FetchRequest, dict[TopicPartition, tuple[int, int]]]:
        topics: dict[str, list[pb.FetchPartition]] = {}
        meta: dict[TopicPartition, tuple[int, int]] = {}
        for tp, st in parts:
            assert st.fetch_position is not None
            topics.setdefault(tp.topic, []).append(pb.FetchPartition(
                partition=tp.partition, fetch_offset=st.fetch_position,
                partition_max_bytes=self.max_partition_fetch_bytes, current_leader_epoch=-1))
            meta[tp] = (st.fetch_position, st.generation)
        req = pb.FetchRequest(replica_id=-1, max_wait_ms=self.fetch_max_wait_ms, min_bytes=self.fetch_min_bytes,
                              max_bytes=self.fetch_max_bytes, client_id=self.client_id,
                              topics=[pb.FetchTopic(name=t, partitions=ps) for t, ps in topics.items()])
        return req, meta

    def _handle_fetch(self, fut: grpc.Future, meta: dict[TopicPartition, tuple[int, int]]) -> None:
        try:
            resp = fut.result()
        except grpc.RpcError as exc:
            if not self._closed:
                log.debug("fetch failed: %s", exc.code())
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    for addr in list(self.cluster.snapshot.brokers.values()):
                        if not tcp_reachable(addr):
                            self.cluster.forget(addr)
                self._refresh_soon()
            return
        refresh = False
        with self._lock:
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition)
                    st = self._states.get(tp)
                    if tp not in meta or st is None:
                        continue
                    offset, gen = meta[tp]
                    if st.generation != gen:
                        continue
                    if p.error_code:
                        err = error_for(p.error_code, p.error_message)
                        if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                            st.fetch_position = None  # wait for poll() to reset the position
                            self._completed.append(Completed(tp, gen, offset, b"", -1, -1, p.error_code, p.error_message))
                        elif err.retriable:
                            refresh = True
                        else:
                            self._pending_error = err
                        continue
                    data = p.records
                    next_offset = offset
                    for _, h in iter_batches(data, validate=False):
                        next_offset = h.next_offset
                    if next_offset > offset:
                        st.fetch_position = next_offset
                        st.buffered += len(data)
                        self._completed.append(Completed(tp, gen, offset, data, p.high_watermark, p.log_start_offset))
                    st.high_watermark = p.high_watermark
            self._lock.notify_all()
        if refresh:
            self._refresh_soon()

    _last_refresh = 0.0

    def _refresh_rate_limited(self) -> None:
        if time.monotonic() - self._last_refresh > 0.5:
            self._last_refresh = time.monotonic()
            try:
                self.cluster.refresh()
            except TidelogError:
                pass

    def _refresh_soon(self) -> None:
        time.sleep(self.retry_backoff_s)
        try:
            self.cluster.refresh()
        except TidelogError as exc:
            log.debug("metadata refresh failed: %s", exc)

    def highwater(self, partition: TopicPartition) -> int:
        return self._state(TopicPartition(*partition)).high_watermark

    def close(self) -> None:
        self._closed = True
        with self._lock:
            self._lock.notify_all()
        if self._fetcher is not None:
            self._fetcher.join(timeout=5)
        self.cluster.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
