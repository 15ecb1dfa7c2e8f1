"""Reading topics for the console over the brokers' public gRPC API (the Python client's pieces).

``LogReader`` answers the message browser: log start / end offsets and offsets by timestamp
(ListOffsets), and a bounded read of one partition's offset range with an optional filter (Fetch, through
``shared.client.range_reader``). ``TailFollower`` follows a topic's new records on a thread for live tail,
keeping only the newest few and a count (a page cannot draw thousands a second). ``RecordSender`` produces
one record. Synchronous (threads); the routes run them with ``asyncio.to_thread``.

On a secure cluster each signed-in user gets their own (``services.console.auth``): ``security`` (the
user's ``ClientSecurity``: TLS with the cluster's CA, SCRAM) for the reader, and kafka-python's settings
(``client_settings``) for the producer and the tail's consumer, so the brokers' ACLs apply to the user.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from shared.client.cluster import ClusterClient
from shared.client.consumer import Consumer
from shared.client.producer import Producer
from shared.client.range_reader import read_range
from shared.client.security import ClientSecurity
from shared.errors import ErrorCode, TidelogError, error_for
from shared.proto import tidelog_pb2 as pb
from shared.records.decoder import decode_records, records_section
from shared.records.record import Record
from shared.types import TopicPartition

EARLIEST = -2
LATEST = -1


@dataclass
class ReadResult:
    records: list[Record]
    next_offset: int  # where a read continuing this one starts
    scanned: int  # records looked at (the filter may have kept fewer)
    stopped_early: bool  # the time budget ran out before the range's end


class LogReader:
    def __init__(self, bootstrap: str, client_id: str = "tidelog-console", request_timeout_s: float = 10.0,
                 security: ClientSecurity | None = None) -> None:
        self.cluster = ClusterClient(bootstrap, client_id, int(request_timeout_s * 1000), security=security)
        self.timeout = request_timeout_s

    def close(self) -> None:
        self.cluster.close()

    def list_offsets(self, wanted: dict[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int]]:
        """``{tp: (offset, timestamp)}`` for each ``{tp: timestamp}`` (-2 earliest, -1 latest: the high
        watermark); a timestamp past every record gives offset -1."""
        out: dict[TopicPartition, tuple[int, int]] = {}
        pending = dict(wanted)
        deadline = time.monotonic() + self.timeout
        while pending:
            by_leader: dict[int, list[TopicPartition]] = {}
            retry: TidelogError | None = None
            for tp in pending:
                try:
                    by_leader.setdefault(self.cluster.leader_for(tp), []).append(tp)
                except TidelogError as exc:
                    if not exc.retriable:
                        raise
                    retry = exc
            for leader, tps in by_leader.items():
                topics: dict[str, list[pb.ListOffsetsPartition]] = {}
                for tp in tps:
                    topics.setdefault(tp.topic, []).append(pb.ListOffsetsPartition(partition=tp.partition,
                                                                                   timestamp=pending[tp]))
                req = pb.ListOffsetsRequest(replica_id=-1, topics=[pb.ListOffsetsTopic(name=t, partitions=ps)
                                                                   for t, ps in topics.items()])
                try:
                    resp = self.cluster.broker_stub(leader).ListOffsets(req, timeout=self.timeout)
                except (grpc.RpcError, TidelogError) as exc:
                    retry = TidelogError(f"ListOffsets to broker {leader}: {exc!r}", code=ErrorCode.NETWORK_EXCEPTION)
                    continue
                for t in resp.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition)
                        if p.error_code:
                            err = error_for(p.error_code, p.error_message)
                            if not err.retriable:
                                raise err
                            retry = err
                            continue
                        out[tp] = (p.offset, p.timestamp)
                        pending.pop(tp, None)
            if pending:
                if time.monotonic() > deadline:
                    raise retry or TidelogError("ListOffsets did not succeed in time", code=ErrorCode.REQUEST_TIMED_OUT)
                time.sleep(0.1)
                self.cluster.refresh([tp.topic for tp in pending])
        return out

    def bounds(self, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        """``{partition: (log start, log end)}``."""
        tps = [TopicPartition(topic, p) for p in partitions]
        lo = self.list_offsets(dict.fromkeys(tps, EARLIEST))
        hi = self.list_offsets(dict.fromkeys(tps, LATEST))
        return {tp.partition: (lo[tp][0], hi[tp][0]) for tp in tps}

    def offsets_for_time(self, topic: str, partitions: Sequence[int], timestamp_ms: int) -> dict[int, int]:
        """The first offset at or after ``timestamp_ms`` per partition (-1: none yet)."""
        found = self.list_offsets({TopicPartition(topic, p): timestamp_ms for p in partitions})
        return {tp.partition: off for tp, (off, _) in found.items()}

    def read(self, tp: TopicPartition, start: int, end: int, limit: int, keep: Any = None,
             budget_s: float = 3.0) -> ReadResult:
        """Up to ``limit`` records of ``[start, end)`` for which ``keep(record)`` holds (all when None),
        reading for at most about ``budget_s`` seconds."""
        got: list[Record] = []
        scanned = 0
        position = start
        if start >= end or limit <= 0:
            return ReadResult(got, start, 0, False)
        stop_at = time.monotonic() + budget_s
        batches = read_range(self.cluster, tp, start, end, max_bytes=1024 * 1024, timeout_s=self.timeout, depth=1,
                             fail_on_data_loss=False)
        try:
            for buf, pos, header in batches:
                position = max(position, header.next_offset)
                if header.is_control:
                    continue
                for rec in decode_records(header, records_section(buf, header, pos)):
                    if rec.offset < start or rec.offset >= end:
                        continue
                    scanned += 1
                    if keep is None or keep(rec):
                        got.append(rec)
                        if len(got) >= limit:
                            return ReadResult(got, rec.offset + 1, scanned, rec.offset + 1 < end)
                if time.monotonic() > stop_at:
                    return ReadResult(got, min(position, end), scanned, position < end)
        finally:
            batches.close()
        return ReadResult(got, end, scanned, False)


class TailFollower:
    """Follows ``topic`` from its end on a thread; ``take()`` returns the newest ``keep`` records seen since
    the previous call and how many there were in all."""

    def __init__(self, bootstrap: str, topic: str, partitions: Sequence[int], keep: int = 50,
                 keep_record: Any = None, client_settings: dict[str, Any] | None = None) -> None:
        self.topic = topic
        self._recent: deque[Any] = deque(maxlen=keep)
        self._seen = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._keep_record = keep_record
        self.error: str | None = None
        self._consumer = Consumer(bootstrap, client_id="tidelog-console-tail", auto_offset_reset="latest",
                                  max_poll_records=5000, fetch_max_wait_ms=200, **(client_settings or {}))
        tps = [TopicPartition(topic, p) for p in partitions]
        self._consumer.assign(tps)
        self._consumer.seek_to_end(*tps)
        for tp in tps:  # pin the start now: records produced from here on are followed
            self._consumer.position(tp)
        self._thread = threading.Thread(target=self._run, name=f"console-tail-{topic}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                batch = self._consumer.poll(timeout_ms=200)
                if not batch:
                    continue
                with self._lock:
                    for rec in batch:
                        if self._keep_record is None or self._keep_record(rec):
                            self._seen += 1
                            self._recent.append(rec)
        except Exception as exc:  # shown to the page, which stops following
            self.error = f"{type(exc).__name__}: {exc}"

    def take(self) -> tuple[list[Any], int]:
        with self._lock:
            recent, seen = list(self._recent), self._seen
            self._recent.clear()
            self._seen = 0
        return recent, seen

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        with contextlib.suppress(Exception):
            self._consumer.close()


class RecordSender:
    """One idempotent producer shared by the console's Produce form, made on first use."""

    def __init__(self, bootstrap: str, client_settings: dict[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self._settings = client_settings or {}  # kafka-python's security settings (none: PLAINTEXT)
        self._producer: Producer | None = None
        self._lock = threading.Lock()

    def send(self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]],
             partition: int | None) -> tuple[int, int]:
        with self._lock:
            if self._producer is None:
                self._producer = Producer(self.bootstrap, acks="all", linger_ms=0, max_block_ms=5000,
                                          delivery_timeout_ms=15_000, request_timeout_ms=10_000,
                                          client_id="tidelog-console", **self._settings)
            producer = self._producer
        md = producer.send(topic, value, key=key, partition=partition, headers=headers).get(20)
        return md.partition, md.offset

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                with contextlib.suppress(Exception):
                    self._producer.close(5)
                self._producer = None
