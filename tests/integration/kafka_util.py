"""Helpers for the tests of the brokers' Kafka-protocol listener: raw request frames written with kio's
writers (Kafka's own JSON definitions) over a plain socket, response frames read back with kio's
readers, record batches built by kafka-python's encoder (independent of Tidelog's), reading a service's
JSON log, and reading a topic to its end with confluent-kafka (librdkafka) without a consumer group.

Nothing here imports the broker: a test talks to it only through sockets, as a Kafka client would.
"""

from __future__ import annotations

import io
import json
import os
import socket
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from shared.kafka.messages import build
from tests.conftest import Cluster

_SIZE = struct.Struct(">i")
CLIENT_ID = "tidelog-kafka-test"

# API keys the tests send.
PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS = 0, 1, 2, 3, 18
# Kafka's error codes the tests read.
UNSUPPORTED_VERSION = 35


def kafka_bootstrap(cluster: Cluster) -> str:
    """``host:port,...`` of every broker's Kafka listener (what ``tidelog up`` writes as kafka_bootstrap)."""
    return ",".join(p.info["kafka"] for p in cluster.procs("broker") if p.info.get("kafka"))


def grpc_bootstrap(cluster: Cluster) -> str:
    return ",".join(p.address for p in cluster.procs("broker"))


def endpoint(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


# -- frames -------------------------------------------------------------------------------------------------


@cache
def _request_codec(api_key: int, version: int) -> tuple[type, Any, Any]:
    cls = load_request_schema(api_key, version)
    return cls, entity_writer(cls.__header_schema__), entity_writer(cls)


@cache
def _response_codec(api_key: int, version: int) -> tuple[Any, Any]:
    cls = load_response_schema(api_key, version)
    return entity_reader(cls.__header_schema__), entity_reader(cls)


def encode_request(api_key: int, version: int, values: dict[str, Any] | Any, correlation_id: int = 1,
                   client_id: str | None = CLIENT_ID) -> bytes:
    """A whole request frame, 4-byte size prefix included, written by kio's writers."""
    cls, write_header, write_body = _request_codec(api_key, version)
    body = values if isinstance(values, cls) else build(cls, values)
    buf = io.BytesIO()
    write_header(buf, build(cls.__header_schema__, request_api_key=api_key, request_api_version=version,
                            correlation_id=correlation_id, client_id=client_id))
    write_body(buf, body)
    payload = buf.getvalue()
    return _SIZE.pack(len(payload)) + payload


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """``(correlation_id, body)`` of a response frame (without its size prefix)."""
    read_header, read_body = _response_codec(api_key, version)
    header, n = read_header(frame, 0)
    body, m = read_body(frame, n)
    assert n + m == len(frame), f"{len(frame) - n - m} bytes after the response body"
    return header.correlation_id, body


class KafkaWire:
    """One raw TCP connection to a Kafka listener."""

    def __init__(self, address: str, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(endpoint(address), timeout=timeout)
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read_exactly(self, n: int) -> bytes | None:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                return None
            chunks += chunk
        return bytes(chunks)

    def read_frame(self) -> bytes | None:
        """The next response frame (without its size prefix); None when the broker closed the connection."""
        try:
            prefix = self._read_exactly(4)
            if prefix is None:
                return None
            return self._read_exactly(_SIZE.unpack(prefix)[0])
        except ConnectionResetError:
            return None

    def request(self, api_key: int, version: int, values: dict[str, Any] | Any) -> Any:
        """Send one request and return the decoded response body (the correlation id checked)."""
        self._correlation += 1
        self.send(encode_request(api_key, version, values, self._correlation))
        frame = self.read_frame()
        assert frame is not None, f"the broker closed the connection instead of answering api {api_key} v{version}"
        correlation_id, body = decode_response(api_key, version, frame)
        assert correlation_id == self._correlation
        return body

    def closed_by_peer(self, timeout: float) -> bool:
        """True once the broker has closed the connection (end of file or reset), False if it is still
        open after ``timeout`` seconds. Reads and drops anything the broker sends meanwhile."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                if not self.sock.recv(65536):
                    return True
            except TimeoutError:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
        return False


# -- record batches -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rec:
    """A record as every client reads it back."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


def build_batch(records: Sequence[Rec], producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1) -> bytes:
    """A RecordBatch v2 (uncompressed) encoded by kafka-python's builder, not Tidelog's."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=producer_epoch,
                                        base_sequence=base_sequence, batch_size=1 << 24)
    for i, r in enumerate(records):
        builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
    return bytes(builder.build())


# -- service logs -------------------------------------------------------------------------------------------


def log_mark(path: str) -> int:
    return os.path.getsize(path)


def log_records(path: str, since: int = 0) -> list[dict[str, Any]]:
    """The JSON log lines a service wrote after byte ``since`` of its log file."""
    with open(path, errors="replace") as f:
        f.seek(since)
        out = []
        for line in f:
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue  # a line being written
        return out


def listener_lines(path: str, since: int) -> list[dict[str, Any]]:
    return [r for r in log_records(path, since) if r.get("logger", "").startswith("services.broker.kafka")]


# -- reading with confluent-kafka ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Read:
    partition: int
    offset: int
    rec: Rec
    timestamp_type: int


def confluent_consumer(bootstrap: str, **conf: Any) -> Any:
    from confluent_kafka import Consumer

    # group.id is mandatory in confluent-kafka even for assign(); nothing is committed, no group is joined.
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"unused-{os.getpid()}", "enable.auto.commit": False,
                     "enable.partition.eof": True, "topic.metadata.refresh.interval.ms": 1000, **conf})


def confluent_read(bootstrap: str, topic: str, partitions: Iterable[int], timeout: float = 30.0,
                   start: int | None = None, **conf: Any) -> list[Read]:
    """Every record of the partitions from ``start`` (default: the beginning) to their end, read with
    confluent-kafka's Consumer and assign() (no group), in partition then offset order."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    parts = list(partitions)
    consumer = confluent_consumer(bootstrap, **conf)
    out: list[Read] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING if start is None else start) for p in parts])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < len(parts):
            assert time.monotonic() < deadline, f"{topic}: only {sorted(at_end)} of {parts} read to their end"
            for m in consumer.consume(1000, 0.5):
                err = m.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    at_end.add(m.partition())
                    continue
                at_end.discard(m.partition())
                ts_type, ts = m.timestamp()
                rec = Rec(m.key(), m.value(), tuple((k, v) for k, v in (m.headers() or [])), ts)
                out.append(Read(m.partition(), m.offset(), rec, ts_type))
    finally:
        consumer.close()
    return sorted(out, key=lambda r: (r.partition, r.offset))


def wait_partitions_led(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> None:
    """Wait until Kafka Metadata shows every partition of ``topic`` with a leader."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions and \
                all(p.leader >= 0 and p.error is None for p in md.partitions.values()):
            return
        assert time.monotonic() < deadline, f"{topic}: partitions not all led after {timeout}s ({md})"
        time.sleep(0.1)


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime: fields 14 and 15 of stat(5)
