"""The consumer's fetches over a broker's Kafka listener: Kafka's own Fetch (v11) on a plain TCP socket.

Receiving a fetch through grpcio costs the client 0.75-1.0 µs of CPU per 1 KiB record before a single
record is decoded (``scripts/bench/fetch_raw.py``): grpcio copies each message into a new ``bytes`` on
its own thread, and hands it over through two more. A Kafka response read straight off a socket costs
about a fifth of that: one ``recv`` copy into the ``bytes`` the consumer then decodes in place. The
broker's Kafka door serves the same read as its gRPC door (``services/broker/kafka/fetch.py``), with the
same ACLs, quotas and error codes, and answers as Kafka does, so this is what any Kafka client receives.

Kafka's wire has no "continue where the last response ended" (the gRPC ``FetchStream`` does), so a
request names each partition's exact fetch position and a partition is in one request at a time
(``pipelined = False``): its next is sent as soon as a response arrives, while the consumer decodes it.
Requests for different partitions may be in flight together (the consumer keeps up to two per broker);
responses come back in request order.

Requests are sessionless full fetches (session epoch -1). ``receive()`` returns the response as a
``KafkaFetchResponse`` shaped like ``shared.proto.fetch_wire.FetchResponseView`` (``fetch_offset`` from the
request, ``next_offset`` after the last whole batch), so the consumer handles both alike.

The socket is opened by the thread that receives (``connect()``), never under the consumer's lock; a
request sent before that waits in the stream. Any socket or framing failure raises ``KafkaFetchError``
and ends the stream, as a failed gRPC call does; ``answered`` says whether any response came first
(a listener that accepts and then drops every connection never answers).

A received response still counts as in flight until the caller calls ``done()`` (the consumer does, under
its lock, as it files the response): otherwise another thread could send the next fetch at the
positions the response is about to move.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Generic, TypeVar

from shared.errors import ErrorCode
from shared.records.header import next_offset_within
from shared.types import TopicPartition

M = TypeVar("M")

API_KEY = 1
VERSION = 11  # the last version before flexible encoding; has log_start_offset and sessions
FINAL_EPOCH = -1  # a sessionless full fetch (KIP-227)
MAX_RESPONSE_BYTES = 256 << 20  # at least; a frame larger than the stream's limit is not an answer to it

_HEADER = struct.Struct(">ihhih")  # size, api_key, api_version, correlation_id, client_id length
_BODY = struct.Struct(">iiiibiii")  # replica_id .. session_epoch, topic count
_STR = struct.Struct(">h")
_PARTITION = struct.Struct(">iiqqi")  # partition, current_leader_epoch, fetch_offset, log_start_offset, max bytes
_TAIL = struct.Struct(">ih")  # no forgotten topics, rack_id ""
_INT32 = struct.Struct(">i")
_RESP_HEAD = struct.Struct(">iihii")  # correlation_id, throttle_time_ms, error_code, session_id, topic count
_RESP_PART = struct.Struct(">ihqqq")  # partition, error_code, high_watermark, last_stable_offset, log_start
_ABORTED = struct.Struct(">qq")


class KafkaFetchError(Exception):
    """The Kafka fetch connection failed or answered out of step; the stream is over."""


def encode_fetch(correlation_id: int, client_id: bytes, partitions: Iterable[tuple[TopicPartition, int]], *,
                 max_wait_ms: int, min_bytes: int, max_bytes: int, partition_max_bytes: int,
                 isolation_level: int) -> bytes:
    """A size-prefixed Fetch v11 request (header v1) for ``(partition, fetch_offset)`` pairs."""
    topics: dict[str, list[tuple[int, int]]] = {}
    for tp, offset in partitions:
        topics.setdefault(tp.topic, []).append((tp.partition, offset))
    parts = [_BODY.pack(-1, max_wait_ms, min_bytes, max_bytes, isolation_level, 0, FINAL_EPOCH, len(topics))]
    for name, ps in topics.items():
        raw = name.encode()
        parts += [_STR.pack(len(raw)), raw, _INT32.pack(len(ps))]
        parts += [_PARTITION.pack(p, -1, offset, -1, partition_max_bytes) for p, offset in ps]
    parts.append(_TAIL.pack(0, 0))
    body = b"".join(parts)
    size = _HEADER.size - 4 + len(client_id) + len(body)
    return _HEADER.pack(size, API_KEY, VERSION, correlation_id, len(client_id)) + client_id + body


class KafkaFetchPartition:
    """A partition of a Kafka fetch response; its whole batches are ``buf[records_start:records_end]``."""

    __slots__ = ("partition", "error_code", "error_message", "high_watermark", "last_stable_offset",
                 "log_start_offset", "fetch_offset", "next_offset", "aborted_transactions", "buf",
                 "records_start", "records_end")

    def __init__(self, buf: bytes, partition: int, error_code: int, high_watermark: int, last_stable_offset: int,
                 log_start_offset: int, aborted: list[tuple[int, int]], start: int, stop: int,
                 fetch_offset: int) -> None:
        self.partition = partition
        self.error_code = error_code
        self.error_message = ""
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.aborted_transactions = aborted
        self.buf = buf
        self.fetch_offset = fetch_offset
        # A response may end inside a batch (the broker reads up to the partition's max bytes): only
        # whole batches count, and the next fetch starts after the last of them.
        self.next_offset, self.records_end = next_offset_within(buf, start, stop, fetch_offset)
        self.records_start = start
        if self.records_end == start < stop and not error_code:
            # Kafka returns at least one whole batch (KIP-74); bytes with none in them cannot be read, and
            # Kafka's consumer gives up on them as RecordTooLargeException (not retriable)
            self.error_code = ErrorCode.MESSAGE_TOO_LARGE
            self.error_message = (f"the {stop - start} bytes fetched from partition {partition} at offset "
                                  f"{fetch_offset} hold no whole record batch")

    @property
    def records_size(self) -> int:
        return self.records_end - self.records_start


class KafkaFetchTopic:
    __slots__ = ("name", "partitions")

    def __init__(self, name: str, partitions: list[KafkaFetchPartition]) -> None:
        self.name = name
        self.partitions = partitions


class KafkaFetchResponse:
    __slots__ = ("throttle_time_ms", "error_code", "session_id", "topics")

    def __init__(self, throttle_time_ms: int, error_code: int, session_id: int, topics: list[KafkaFetchTopic]) -> None:
        self.throttle_time_ms = throttle_time_ms
        self.error_code = error_code
        self.session_id = session_id
        self.topics = topics


def parse_fetch(buf: bytes, correlation_id: int, offsets: dict[TopicPartition, int]) -> KafkaFetchResponse:
    """A Fetch v11 response frame (without its size prefix). ``offsets``: the requested fetch positions.
    Raises ``KafkaFetchError`` for a frame that is not the answer expected."""
    try:
        corr, throttle, error, session, ntopics = _RESP_HEAD.unpack_from(buf, 0)
        if corr != correlation_id:
            raise KafkaFetchError(f"response for correlation id {corr}, expected {correlation_id}")
        pos = _RESP_HEAD.size
        topics = []
        for _ in range(ntopics):
            (n,) = _STR.unpack_from(buf, pos)
            name = buf[pos + 2:pos + 2 + n].decode()
            pos += 2 + n
            (nparts,) = _INT32.unpack_from(buf, pos)
            pos += 4
            parts = []
            for _ in range(nparts):
                p, err, hw, lso, lstart = _RESP_PART.unpack_from(buf, pos)
                pos += _RESP_PART.size
                (naborted,) = _INT32.unpack_from(buf, pos)
                pos += 4
                aborted = []
                for _ in range(max(naborted, 0)):
                    aborted.append(_ABORTED.unpack_from(buf, pos))
                    pos += 16
                (size,) = _INT32.unpack_from(buf, pos + 4)  # after preferred_read_replica
                pos += 8
                size = max(size, 0)  # null records: none
                if pos + size > len(buf):
                    raise KafkaFetchError(f"records of {name}-{p} run past the response ({size} bytes)")
                offset = offsets.get(TopicPartition(name, p), 0)
                parts.append(KafkaFetchPartition(buf, p, err, hw, lso, lstart, aborted, pos, pos + size, offset))
                pos += size
            topics.append(KafkaFetchTopic(name, parts))
    except (struct.error, UnicodeDecodeError) as exc:
        raise KafkaFetchError(f"malformed fetch response: {exc}") from None
    return KafkaFetchResponse(throttle, error, session, topics)


class KafkaFetchStream(Generic[M]):
    """Fetches to one broker's Kafka listener, answered in order; ``receive()`` returns each response with
    the meta given to ``fetch``. One thread receives (and connects); any thread may ``fetch``."""

    pipelined = False

    def __init__(self, address: str, broker: int, client_id: str, connect_timeout_s: float,
                 max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.address = address
        self.max_response_bytes = max(max_response_bytes, MAX_RESPONSE_BYTES)
        self.broker = broker
        self.client_id = client_id.encode()
        self.connect_timeout_s = connect_timeout_s
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._file = None
        self._outbox: list[bytes] = []  # requests sent before the socket was open
        self._pending: deque[tuple[int, dict[TopicPartition, int], M]] = deque()
        self._unfiled = 0  # responses received and not yet ``done()``
        self.answered = False
        self._correlation = 0
        self.last_activity = time.monotonic()
        self.closed = False

    @property
    def in_flight(self) -> int:
        return len(self._pending) + self._unfiled

    def done(self) -> None:
        """The last response ``receive()`` returned is filed: the next fetch may leave."""
        with self._lock:
            self._unfiled = max(0, self._unfiled - 1)

    def connect(self) -> None:
        """Open the socket and send what is waiting (the receiving thread, without the consumer's lock)."""
        host, _, port = self.address.rpartition(":")
        try:
            sock = socket.create_connection((host.strip("[]"), int(port)), timeout=self.connect_timeout_s)
        except (OSError, ValueError) as exc:
            raise KafkaFetchError(f"cannot connect to the Kafka listener {self.address}: {exc}") from None
        sock.settimeout(None)  # a silent broker is noticed by the consumer, which closes the stream
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        failed: OSError | None = None
        with self._lock:
            if self.closed:
                sock.close()
                raise KafkaFetchError("closed")
            self._sock = sock
            self._file = sock.makefile("rb", buffering=1 << 16)  # reads of a whole frame go straight into its bytes
            outbox, self._outbox = self._outbox, []
            try:
                for request in outbox:  # under the lock: nothing may overtake them
                    sock.sendall(request)
            except OSError as exc:
                failed = exc
        if failed is not None:
            self._release()
            raise KafkaFetchError(f"send to {self.address} failed: {failed}")

    def fetch(self, partitions: list[tuple[TopicPartition, int]], meta: M, *, max_wait_ms: int, min_bytes: int,
              max_bytes: int, partition_max_bytes: int, isolation_level: int) -> None:
        with self._lock:
            if self.closed:
                return
            self._correlation = corr = (self._correlation + 1) & 0x7FFFFFFF
            request = encode_fetch(corr, self.client_id, partitions, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                                   max_bytes=max_bytes, partition_max_bytes=partition_max_bytes,
                                   isolation_level=isolation_level)
            if not self._pending:
                self.last_activity = time.monotonic()  # the wait for a response starts now
            self._pending.append((corr, dict(partitions), meta))
            if self._sock is None:
                self._outbox.append(request)
                return
            try:
                self._sock.sendall(request)
            except OSError:
                self._shutdown()  # the receiving thread sees the connection end and reports it

    def receive(self) -> tuple[KafkaFetchResponse, M]:
        """The next response (blocking); raises ``KafkaFetchError`` when the connection ends or fails
        (the stream is then over, and its socket released). Call ``done()`` once it is filed."""
        try:
            frame = self._read_frame()
            with self._lock:
                if not self._pending:
                    raise KafkaFetchError(f"{self.address} answered a fetch that was not asked")
                corr, offsets, meta = self._pending.popleft()
                self._unfiled += 1
                self.last_activity = time.monotonic()
            resp = parse_fetch(frame, corr, offsets)
        except KafkaFetchError:
            self._release()
            raise
        self.answered = True
        return resp, meta

    def _read_frame(self) -> bytes:
        f = self._file
        if f is None or self.closed:
            raise KafkaFetchError("closed")
        try:
            head = f.read(4)
            if len(head) < 4:
                raise KafkaFetchError(f"{self.address} closed the connection")
            (size,) = _INT32.unpack(head)
            if not 0 < size <= self.max_response_bytes:
                raise KafkaFetchError(f"frame of {size} bytes from {self.address}")
            frame = f.read(size)
        except (OSError, ValueError) as exc:  # ValueError: the file was closed under the read
            raise KafkaFetchError(f"receive from {self.address} failed: {exc}") from None
        if len(frame) < size:
            raise KafkaFetchError(f"{self.address} closed the connection")
        return frame

    def _release(self) -> None:
        """The receiving thread's last act: close the buffered reader (it holds the socket's descriptor)."""
        with self._lock:
            f, self._file = self._file, None
        if f is not None:
            f.close()

    def _shutdown(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)  # wakes the receiving thread
            except OSError:
                pass

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._shutdown()
            if self._sock is not None:
                self._sock.close()
