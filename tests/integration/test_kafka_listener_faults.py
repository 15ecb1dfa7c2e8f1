"""The brokers' Kafka-protocol listener under bad input and load, on real processes (real etcd, a
controller, one broker):

- a size prefix over ``socket.request.max.bytes`` closes the connection at once (nothing buffered);
- a malformed frame, an unknown API key or an unsupported version closes only that connection, with one
  WARNING line and no traceback, while other connections keep being served;
- ApiVersions of an unknown version is answered in v0 with UNSUPPORTED_VERSION and the served ranges;
- idle connections close after ``connections.max.idle.ms`` (a broker started with a low value), a long
  poll is not idle, a half-sent request does not hold its connection forever;
- Kafka's request rules the clients rely on: pipelined requests answered in order, a failed acks=0
  produce closes the connection, one batch per partition in Produce v3+;
- Hypothesis sends mutated real request frames (flipped, truncated, extended), then every log is read
  end to end with confluent-kafka and matches what was acknowledged;
- 1,000 idle client connections cost the broker next to no CPU and it keeps serving.
"""

from __future__ import annotations

import resource
import socket
import struct
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.client import Admin
from tests.conftest import Cluster, start_cluster, wait_for
from tests.integration.kafka_util import (
    API_VERSIONS,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    PRODUCE,
    UNSUPPORTED_VERSION,
    KafkaWire,
    Rec,
    build_batch,
    confluent_read,
    decode_response,
    encode_request,
    grpc_bootstrap,
    kafka_bootstrap,
    listener_lines,
    log_mark,
    log_records,
    proc_cpu_seconds,
    wait_partitions_led,
)

INIT_PRODUCER_ID = 22
INVALID_RECORD = 87
#: What the data path serves today (ApiVersions answers at least these; group and admin APIs come next).
DATA_PATH_VERSIONS = {18: (0, 4), 3: (1, 12), 0: (3, 11), 1: (4, 15), 2: (1, 8), 10: (0, 4), 22: (0, 5)}
IDLE_MS = 1000
BASE_ENV = {"TIDELOG_CONTROLLED_SHUTDOWN_ENABLE": "false"}


@dataclass
class Broker:
    cluster: Cluster
    kafka: str  # the broker's Kafka listener
    pid: int
    log_path: str
    admin: Admin

    def alive(self) -> bool:
        popen = self.cluster.proc("broker", 1).popen
        return popen is None or popen.poll() is None

    def new_topic(self, prefix: str, partitions: int = 1) -> str:
        topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.admin.create_topic(topic, partitions=partitions)
        wait_partitions_led(self.kafka, topic, partitions)
        # Metadata can name the leader a moment before the broker has taken the partition on; an acks=0
        # produce in that moment fails, and Kafka's rule closes the connection. ListOffsets needs the leader.
        wait_for(lambda: self.leads(topic, partitions), 10, what=f"{topic} led by the broker itself")
        return topic

    def leads(self, topic: str, partitions: int) -> bool:
        with KafkaWire(self.kafka) as w:
            resp = w.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": p, "timestamp": -1} for p in range(partitions)]}]})
        return all(p.error_code == 0 for t in resp.topics for p in t.partitions)


def one_broker(tmp: str, env: dict[str, str]) -> Iterator[Broker]:
    c = start_cluster(tmp, controllers=1, brokers=1, coordinators=0, cleaners=0, quotas=0,
                      extra_env={**BASE_ENV, **env})
    proc = c.proc("broker", 1)
    admin = Admin(grpc_bootstrap(c))
    try:
        yield Broker(c, kafka_bootstrap(c), proc.pid, proc.log_path, admin)
    finally:
        admin.close()
        c.lc.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from one_broker(str(tmp_path_factory.mktemp("kafka-faults")), {})


@pytest.fixture
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker of its own, for a test that may bring it down."""
    yield from one_broker(str(tmp_path_factory.mktemp("kafka-own")), {})


@pytest.fixture(scope="module")
def idle_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker whose Kafka connections close after IDLE_MS without a request (connections.max.idle.ms)."""
    yield from one_broker(str(tmp_path_factory.mktemp("kafka-idle")),
                          {"TIDELOG_CONNECTIONS_MAX_IDLE_MS": str(IDLE_MS)})


def api_versions(w: KafkaWire) -> Any:
    resp = w.request(API_VERSIONS, 3, {"client_software_name": "tidelog-tests", "client_software_version": "1"})
    assert resp.error_code == 0
    return resp


def served_ranges(resp: Any) -> dict[int, tuple[int, int]]:
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}


def produce_values(topic: str, partition: int, records: bytes | None, acks: int = -1) -> dict[str, Any]:
    return {"transactional_id": None, "acks": acks, "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}


def warnings_since(b: Broker, mark: int) -> list[dict[str, Any]]:
    return [r for r in listener_lines(b.log_path, mark) if r["level"] == "WARNING"]


def errors_since(b: Broker, mark: int) -> list[dict[str, Any]]:
    return [r for r in log_records(b.log_path, mark) if r["level"] in ("ERROR", "CRITICAL") or "exc" in r]


def serving(b: Broker) -> bool:
    try:
        with KafkaWire(b.kafka, timeout=5) as w:
            api_versions(w)
    except (OSError, AssertionError):
        return False
    return True


def death_note(b: Broker) -> str:
    """What the broker printed outside its JSON log lines (a Rust abort writes plain text to stderr)."""
    with open(b.log_path, errors="replace") as f:
        lines = [line.strip() for line in f if line.strip() and not line.startswith(("{", " "))]
    return " | ".join(lines[:2])


# -- frame size, malformed frames, unknown APIs ---------------------------------------------------------------


def test_a_size_prefix_over_socket_request_max_bytes_closes_at_once_without_reading_a_body(broker: Broker) -> None:
    mark = log_mark(broker.log_path)
    for size in (2**31 - 1, 100 * 1024 * 1024 + 1, -1):  # 2 GB, one byte over the default limit, negative
        with KafkaWire(broker.kafka) as w:
            w.send(struct.pack(">i", size))  # only the prefix: the broker cannot have waited for a body
            assert w.closed_by_peer(10), f"size {size}: connection left open"

    def logged() -> list[dict[str, Any]] | None:
        lines = [r for r in warnings_since(broker, mark) if "size out of bounds" in r["msg"]]
        return lines if len(lines) >= 3 else None

    lines = wait_for(logged, 10, what="the size warnings")
    assert [r["size"] for r in lines] == [2**31 - 1, 100 * 1024 * 1024 + 1, -1]
    assert all(r["socket.request.max.bytes"] == 100 * 1024 * 1024 for r in lines)
    assert not errors_since(broker, mark)


def _header(api_key: int, version: int, correlation_id: int = 7, client_id: bytes = b"bad") -> bytes:
    # Request header v1 (the v2 tagged fields follow as part of each body below).
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


BAD_FRAMES: dict[str, bytes] = {
    "shorter than a header": b"\x00\x03\x00",
    "unknown api key 999": _header(999, 0) + b"\x00",
    "produce v99": _header(PRODUCE, 99) + b"\x00" * 16,
    "fetch v0 (below what is served)": _header(FETCH, 0) + b"\x00" * 16,
    "metadata v12 cut short": encode_request(METADATA, 12, {"topics": [{"name": "abc"}]})[4:-3],
    "metadata v1 array of 2**31-1 topics": _header(METADATA, 1) + b"\x7f\xff\xff\xff",
    "metadata v12 topic of 10**6 bytes": _header(METADATA, 12) + b"\x00" + b"\x02" + b"\x00" * 16 + b"\xc1\x84\x3d",
    "produce v9 topic array longer than the frame": _header(PRODUCE, 9) + b"\x00\x00\xff\xff\x00\x00\x13\x88\xff\xff\x03",
}


def test_malformed_frames_and_unknown_apis_close_only_their_connection_with_one_warning(broker: Broker) -> None:
    with KafkaWire(broker.kafka) as bystander:
        api_versions(bystander)
        mark = log_mark(broker.log_path)
        for name, frame in BAD_FRAMES.items():
            with KafkaWire(broker.kafka) as w:
                w.send(struct.pack(">i", len(frame)) + frame)
                assert w.closed_by_peer(10), f"{name}: connection left open"
                assert w.read_frame() is None, f"{name}: answered"

        def logged() -> list[dict[str, Any]] | None:
            lines = warnings_since(broker, mark)
            return lines if len(lines) >= len(BAD_FRAMES) else None

        warnings = wait_for(logged, 10, what="one warning per bad frame")
        assert len(warnings) == len(BAD_FRAMES), [w["msg"] for w in warnings]
        assert all(w["msg"].startswith("closing Kafka connection") for w in warnings)
        assert not errors_since(broker, mark)
        # The broker kept serving the connection that behaved, and new ones.
        api_versions(bystander)
        resp = bystander.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                "include_topic_authorized_operations": False})
        assert [b.node_id for b in resp.brokers] == [1]
    with KafkaWire(broker.kafka) as w:
        api_versions(w)


_HUGE_COUNT = b"\xfe\xff\xff\xff\x0f"  # unsigned varint 2**32 - 2: a compact array of 2**32 - 3 elements
HUGE_ARRAYS: dict[str, bytes] = {  # header v2 (tagged fields: none), then the body up to the array's count
    "metadata v12 topics": _header(METADATA, 12) + b"\x00" + _HUGE_COUNT,
    "produce v9 topic_data": _header(PRODUCE, 9) + b"\x00" + b"\x00\xff\xff\x00\x00\x13\x88" + _HUGE_COUNT,
    "fetch v12 topics": _header(FETCH, 12) + b"\x00" + b"\xff\xff\xff\xff" + b"\x00" * 12 + b"\x00" + b"\x00" * 8
    + _HUGE_COUNT,
}


def test_a_compact_array_count_of_billions_is_refused_without_allocating_it(own_broker: Broker) -> None:
    """A ~25-byte frame whose compact array claims 2**32 - 3 elements must be a malformed request (one
    warning, the connection closed), not an allocation of tens of GB: nothing large before the bytes exist."""
    mark = log_mark(own_broker.log_path)
    for name, frame in HUGE_ARRAYS.items():
        with KafkaWire(own_broker.kafka) as w:
            w.send(struct.pack(">i", len(frame)) + frame)
            assert w.closed_by_peer(10), f"{name}: connection left open"
        wait_for(lambda: serving(own_broker) or not own_broker.alive(), 30, what="the broker serving, or gone")
        if not own_broker.alive():
            pytest.fail(f"{name} ({len(frame)} bytes) killed the broker: {death_note(own_broker)}")
    assert len(warnings_since(own_broker, mark)) == len(HUGE_ARRAYS)


def _null_at(frame: bytes, back: int) -> bytes:
    """``frame`` (size prefix included) with the empty compact array ``back`` bytes from its end made null."""
    assert frame[-back] == 0x01, "an empty compact array"
    payload = bytearray(frame[4:])
    payload[len(payload) - back] = 0x00
    return bytes(payload)


def _empty_fetch_v12() -> bytes:
    return encode_request(FETCH, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 16,
                                      "session_id": 0, "session_epoch": -1, "topics": [], "forgotten_topics_data": [],
                                      "rack_id": ""})


NULL_ARRAYS: dict[str, bytes] = {  # arrays Kafka's schemas do not let be null
    "fetch v12 forgotten_topics_data": _null_at(_empty_fetch_v12(), 3),
    "fetch v12 topics": _null_at(_empty_fetch_v12(), 4),
    "produce v9 topic_data": _null_at(encode_request(PRODUCE, 9, {"acks": 1, "timeout": 5000, "topic_data": []}), 2),
    "list_offsets v7 topics": _null_at(encode_request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0,
                                                                        "topics": []}), 2),
}


def test_a_null_where_kafka_allows_none_is_a_malformed_request_not_a_traceback(broker: Broker) -> None:
    problems = {}
    for name, frame in NULL_ARRAYS.items():
        mark = log_mark(broker.log_path)
        with KafkaWire(broker.kafka) as w:
            w.send(struct.pack(">i", len(frame)) + frame)
            assert w.closed_by_peer(10), f"{name}: connection left open"
        if errors := errors_since(broker, mark):
            problems[name] = [e.get("exc", e["msg"]).strip().splitlines()[-1] for e in errors]
        else:
            assert len(warnings_since(broker, mark)) == 1, name
    assert not problems, problems


def test_an_unknown_tagged_field_is_skipped_as_kafka_skips_it(broker: Broker) -> None:
    """Tagged fields exist so that newer clients can add fields without a new version: Kafka's readers keep
    an unknown tag as unknownTaggedFields and answer the request."""
    plain = encode_request(API_VERSIONS, 3, {"client_software_name": "tags", "client_software_version": "1"}, 9)
    assert plain.endswith(b"\x00")  # the body's tagged fields: none
    tagged = plain[4:-1] + b"\x01" + b"\x63" + b"\x02" + b"\xab\xcd"  # one field: tag 99, 2 bytes
    with KafkaWire(broker.kafka) as w:
        w.send(struct.pack(">i", len(tagged)) + tagged)
        answer = w.read_frame()
    assert answer is not None, "closed instead of answering"
    correlation_id, resp = decode_response(API_VERSIONS, 3, answer)
    assert (correlation_id, resp.error_code) == (9, 0)


def test_api_versions_of_an_unknown_version_is_answered_in_v0_with_the_served_ranges(broker: Broker) -> None:
    with KafkaWire(broker.kafka) as w:
        frame = _header(API_VERSIONS, 99, correlation_id=4242) + b"\x00future\x00fields"
        w.send(struct.pack(">i", len(frame)) + frame)
        answer = w.read_frame()
        assert answer is not None, "closed instead of answering"
        correlation_id, resp = decode_response(API_VERSIONS, 0, answer)
        assert correlation_id == 4242 and resp.error_code == UNSUPPORTED_VERSION
        ranges = served_ranges(resp)
        assert {k: ranges.get(k) for k in DATA_PATH_VERSIONS} == DATA_PATH_VERSIONS
        # The client retries within the range on the same connection, as librdkafka does.
        assert served_ranges(api_versions(w)) == ranges


# -- idle connections ------------------------------------------------------------------------------------------


def test_an_idle_connection_closes_after_connections_max_idle_ms(idle_broker: Broker) -> None:
    mark = log_mark(idle_broker.log_path)
    with KafkaWire(idle_broker.kafka) as w:
        api_versions(w)
        assert w.closed_by_peer(30), "an idle connection stayed open"
    assert wait_for(lambda: [r for r in listener_lines(idle_broker.log_path, mark)
                             if r["msg"] == "closing idle Kafka connection"], 10, what="the idle close logged")
    with KafkaWire(idle_broker.kafka) as w:  # the listener itself is fine
        api_versions(w)


def test_a_half_sent_request_does_not_hold_its_connection(idle_broker: Broker) -> None:
    with KafkaWire(idle_broker.kafka) as w:
        frame = encode_request(METADATA, 12, {"topics": None})
        w.send(frame[:10])  # the size prefix and a few bytes, then silence
        assert w.closed_by_peer(30)


def test_a_long_poll_longer_than_the_idle_time_is_answered_not_cut(idle_broker: Broker) -> None:
    topic = idle_broker.new_topic("long-poll")
    with KafkaWire(idle_broker.kafka) as w:
        body = {"max_wait": 3 * IDLE_MS, "min_bytes": 1, "max_bytes": 1 << 20, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                            "partition_max_bytes": 1 << 20}]}],
                "forgotten_topics_data": [], "replica_id": -1}
        resp = w.request(FETCH, 12, body)  # nothing to read: the broker waits max_wait, busy, not idle
        part = resp.responses[0].partitions[0]
        assert (part.error_code, part.high_watermark, bytes(part.records or b"")) == (0, 0, b"")
        assert w.closed_by_peer(30)  # idle again afterwards


# -- Kafka's request rules ----------------------------------------------------------------------------------------


def sample_batch(tag: str, n: int = 5, **ids: int) -> tuple[list[Rec], bytes]:
    base = int(time.time() * 1000) - 10_000
    recs = [Rec(f"{tag}-{i}".encode(), f"value {i} of {tag}".encode() * 3, (("i", str(i).encode()),), base + i)
            for i in range(n)]
    return recs, build_batch(recs, **ids)


def test_pipelined_requests_are_answered_in_order(broker: Broker) -> None:
    topic = broker.new_topic("pipelined")
    _, batch = sample_batch("pipe")
    frames, expect = [], []
    for i in range(1, 61):
        kind = i % 3
        if kind == 0:
            frames.append(encode_request(PRODUCE, 9, produce_values(topic, 0, batch, acks=1), i))
        elif kind == 1:
            frames.append(encode_request(METADATA, 12, {"topics": [{"name": topic}]}, i))
        else:
            frames.append(encode_request(API_VERSIONS, 3, {"client_software_name": "p", "client_software_version": "1"}, i))
        expect.append((i, (PRODUCE, 9) if kind == 0 else (METADATA, 12) if kind == 1 else (API_VERSIONS, 3)))
    with KafkaWire(broker.kafka) as w:
        w.send(b"".join(frames))  # all at once: the broker reads and answers them one by one, in order
        offsets = []
        for correlation_id, (key, version) in expect:
            frame = w.read_frame()
            assert frame is not None
            got_id, body = decode_response(key, version, frame)
            assert got_id == correlation_id
            if key == PRODUCE:
                offsets.append(body.responses[0].partition_responses[0].base_offset)
    assert offsets == [5 * i for i in range(20)]  # appends in request order


def test_acks_0_produce_answers_nothing_and_the_connection_goes_on(broker: Broker) -> None:
    topic = broker.new_topic("acks0")
    recs, batch = sample_batch("acks0")
    with KafkaWire(broker.kafka) as w:
        w.send(encode_request(PRODUCE, 9, produce_values(topic, 0, batch, acks=0), 1))
        api_versions(w)  # the next answer is the next request's: acks=0 had none
    assert [(r.offset, r.rec) for r in confluent_read(broker.kafka, topic, [0])] == list(enumerate(recs))


def test_a_failed_acks_0_produce_closes_the_connection(broker: Broker) -> None:
    """Kafka's rule: an acks=0 producer gets no response, so when its produce fails (here: a partition
    that does not exist) the broker closes the connection, and the producer refreshes its metadata."""
    topic = broker.new_topic("acks0-fail")
    _, batch = sample_batch("acks0-fail")
    with KafkaWire(broker.kafka) as w:
        w.send(encode_request(PRODUCE, 9, produce_values(topic, 7, batch, acks=0), 1))
        assert w.closed_by_peer(5), "a refused acks=0 produce left the connection open (Kafka closes it)"


def test_produce_v3_and_later_take_exactly_one_batch_per_partition(broker: Broker) -> None:
    """Kafka refuses a Produce v3+ partition carrying two batches with INVALID_RECORD (87)."""
    topic = broker.new_topic("two-batches")
    _, batch = sample_batch("two")
    with KafkaWire(broker.kafka) as w:
        resp = w.request(PRODUCE, 9, produce_values(topic, 0, batch + batch, acks=1))
    part = resp.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (INVALID_RECORD, -1)


# -- mutated frames (Hypothesis) ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    name: str
    api_key: int
    version: int
    payload: bytes  # the frame without its size prefix
    records: tuple[Rec, ...] = ()  # the records of the batch it carries (Produce)


def seeds_for(b: Broker, topic: str) -> list[Seed]:
    with KafkaWire(b.kafka) as w:
        md = w.request(METADATA, 12, {"topics": [{"name": topic}]})
        topic_id = md.topics[0].topic_id
        init = w.request(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60_000})
        assert init.error_code == 0
    out: list[Seed] = []

    def add(name: str, key: int, version: int, values: dict[str, Any], records: tuple[Rec, ...] = ()) -> None:
        out.append(Seed(name, key, version, encode_request(key, version, values, correlation_id=len(out) + 1)[4:],
                        records))

    add("api_versions v3", API_VERSIONS, 3, {"client_software_name": "fuzz", "client_software_version": "1.0"})
    add("api_versions v0", API_VERSIONS, 0, {})
    add("metadata v12", METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": True})
    add("metadata v4", METADATA, 4, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    plain, plain_batch = sample_batch("plain", 4)
    add("produce v9 acks=all", PRODUCE, 9, produce_values(topic, 0, plain_batch), tuple(plain))
    old, old_batch = sample_batch("old", 3)
    add("produce v3 acks=1", PRODUCE, 3, produce_values(topic, 1, old_batch, acks=1), tuple(old))
    idem, idem_batch = sample_batch("idem", 4, producer_id=int(init.producer_id), producer_epoch=0, base_sequence=0)
    add("produce v11 idempotent", PRODUCE, 11, produce_values(topic, 1, idem_batch), tuple(idem))
    fetch = {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 16, "isolation_level": 0,
             "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": ""}
    add("fetch v12", FETCH, 12, {**fetch, "topics": [{"topic": topic, "partitions": [
        {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 15} for p in (0, 1)]}]})
    add("fetch v15 topic ids session", FETCH, 15, {**fetch, "session_epoch": 0, "topics": [{"topic_id": topic_id,
        "partitions": [{"partition": 0, "fetch_offset": 1, "partition_max_bytes": 1 << 15}]}]})
    add("list_offsets v7", LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic,
        "partitions": [{"partition_index": 0, "timestamp": ts} for ts in (-1, -2, -3)]}]})
    return out


def mutate(payload: bytes, mutations: list[tuple[Any, ...]]) -> bytes:
    data = bytearray(payload)
    for m in mutations:
        kind = m[0]
        at = m[1] % (len(data) + 1) if len(m) > 1 and isinstance(m[1], int) else 0
        if kind == "flip" and data:
            data[at % len(data)] ^= m[2]
        elif kind == "set" and data:
            data[at % len(data)] = m[2]
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = m[2]
        elif kind == "delete":
            del data[at:at + m[2]]
        elif kind == "extend":
            data += m[1]
    return bytes(data)


_FLIP = st.tuples(st.just("flip"), st.integers(0, 1 << 16), st.integers(1, 255))
_SET = st.tuples(st.just("set"), st.integers(0, 1 << 16), st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]))
MUTATION = st.one_of(  # in-place changes weigh more: they keep the frame's shape, so handlers see them
    _FLIP, _FLIP, _FLIP, _SET, _SET,
    st.tuples(st.just("truncate"), st.integers(0, 1 << 16)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 16), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("delete"), st.integers(0, 1 << 16), st.integers(1, 8)),
    st.tuples(st.just("extend"), st.binary(min_size=1, max_size=32)),
)


def exchange(address: str, frame: bytes, timeout: float) -> tuple[list[bytes], bool]:
    """Send one frame, half-close, and read until the broker closes: ``(response frames, closed)``."""
    with KafkaWire(address, timeout=timeout) as w:
        w.send(struct.pack(">i", len(frame)) + frame)
        w.sock.shutdown(socket.SHUT_WR)
        frames = []
        try:
            while (answer := w.read_frame()) is not None:
                frames.append(answer)
        except TimeoutError:
            return frames, False
        return frames, True


def test_mutated_real_frames_never_break_the_broker_and_every_log_stays_readable(own_broker: Broker) -> None:
    broker = own_broker
    topic = broker.new_topic("fuzz", partitions=2)
    seeds = seeds_for(broker, topic)
    mark = log_mark(broker.log_path)
    acked: dict[tuple[int, int], tuple[Rec, ...]] = {}  # (partition, base offset) -> the batch acknowledged there
    answered: Counter[str] = Counter()
    closed: Counter[str] = Counter()
    recent: list[tuple[str, bytes]] = []  # the last frames sent, (seed, bytes)
    killer: list[tuple[str, bytes]] = []  # the frames after which the broker no longer accepted connections

    @settings(max_examples=1000, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.integers(0, len(seeds) - 1), st.lists(MUTATION, min_size=1, max_size=3))
    def one_frame(seed_index: int, mutations: list[tuple[Any, ...]]) -> None:
        if killer:  # the broker is gone: the run stops here and the frame that killed it is reported below
            return
        seed = seeds[seed_index]
        frame = mutate(seed.payload, mutations)
        try:
            if not broker.alive():
                raise ConnectionRefusedError
            frames, was_closed = exchange(broker.kafka, frame, timeout=5)
        except ConnectionRefusedError:
            killer.extend(recent)
            return
        recent[:] = [*recent[-2:], (seed.name, frame)]
        key, version, correlation_id = struct.unpack(">hhi", frame[:8]) if len(frame) >= 8 else (-1, -1, -1)
        # A long poll may legitimately outlast the read timeout (a mutated max_wait): only Fetch may.
        assert was_closed or key == FETCH, f"{seed.name}: no answer and no close within 5 s"
        assert len(frames) <= 1, f"{seed.name}: {len(frames)} responses to one request"
        assert broker.alive()
        if not frames:
            closed[seed.name] += 1
            return
        answered[seed.name] += 1
        unsupported = key == API_VERSIONS and not 0 <= version <= 4  # answered in v0 (KIP-511)
        decode_as = (API_VERSIONS, 0) if unsupported else (key, version)
        got_id, body = decode_response(*decode_as, frames[0])
        assert got_id == correlation_id
        if key == PRODUCE and seed.records:
            for t in body.responses:
                for p in t.partition_responses:
                    if t.name == topic and p.error_code == 0:
                        first = acked.setdefault((int(p.index), int(p.base_offset)), seed.records)
                        assert first == seed.records, "two different batches acknowledged at one offset"

    one_frame()
    if killer:
        suspects = "; ".join(f"{name} {frame.hex()}" for name, frame in killer)
        pytest.fail(f"the broker died after one of these mutated frames: {suspects}: {death_note(broker)}")
    print(f"\nmutated frames: {sum(answered.values())} answered, {sum(closed.values())} closed without an answer, "
          f"{len(warnings_since(broker, mark))} warnings; answered by seed: {dict(answered)}")
    # No request crashed a handler: refusals are warnings, never errors or tracebacks.
    problems = errors_since(broker, mark)
    assert not problems, problems[:3]
    assert broker.alive()

    # Every log reads end to end, in complete batches of the seeds, and what was acknowledged is there.
    by_key = {r.key: (s, i) for s in seeds for i, r in enumerate(s.records)}
    got = confluent_read(broker.kafka, topic, [0, 1])
    for p in (0, 1):
        mine = [r for r in got if r.partition == p]
        assert [r.offset for r in mine] == list(range(len(mine))), f"partition {p}: offsets not dense"
        starts: dict[int, tuple[Rec, ...]] = {}
        at = 0
        while at < len(mine):
            seed, index = by_key[mine[at].rec.key]
            assert index == 0, f"partition {p} offset {at}: a batch read from its middle"
            run = tuple(r.rec for r in mine[at:at + len(seed.records)])
            assert run == seed.records, f"partition {p} offset {at}: not the batch {seed.name} sent"
            starts[at] = seed.records
            at += len(seed.records)
        for (ap, base), records in acked.items():
            if ap == p:
                assert starts.get(base) == records, f"acknowledged at {p}/{base}, not in the log"
        idem = [s for s in seeds if s.name.startswith("produce v11")][0]
        assert sum(1 for recs in starts.values() if recs == idem.records) <= 1, "an idempotent batch stored twice"

    # Still serving Kafka clients.
    from confluent_kafka import Producer as CkProducer

    producer = CkProducer({"bootstrap.servers": broker.kafka})
    before = len([r for r in got if r.partition == 0])
    producer.produce(topic, b"after the fuzz", key=b"after", partition=0)
    assert producer.flush(30) == 0
    last = confluent_read(broker.kafka, topic, [0], start=before)
    assert [(r.offset, r.rec.value) for r in last] == [(before, b"after the fuzz")]


# -- load ------------------------------------------------------------------------------------------------------------


def test_a_thousand_idle_connections_cost_next_to_no_cpu_and_the_broker_keeps_serving(broker: Broker) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1500:
        if hard != resource.RLIM_INFINITY and hard < 1500:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < 1500")
        resource.setrlimit(resource.RLIMIT_NOFILE, (1500 if hard == resource.RLIM_INFINITY else min(4096, hard), hard))
    baseline_start = proc_cpu_seconds(broker.pid)
    time.sleep(5)
    baseline = (proc_cpu_seconds(broker.pid) - baseline_start) / 5
    conns: list[KafkaWire] = []
    try:
        for _ in range(1000):
            conns.append(KafkaWire(broker.kafka))
        for w in conns[::50]:  # a few of them are real Kafka clients that spoke once
            api_versions(w)
        start = proc_cpu_seconds(broker.pid)
        time.sleep(10)
        cpu = proc_cpu_seconds(broker.pid) - start
        print(f"\nbroker CPU: {baseline * 10:.2f} s per 10 s idle, {cpu:.2f} s per 10 s with 1,000 idle Kafka connections")
        assert cpu < 5.0, "a very loose sanity bound: idle connections must not keep the broker busy"
        for w in conns[::100]:  # still open and served
            api_versions(w)
        with KafkaWire(broker.kafka) as fresh:
            api_versions(fresh)
        topic = broker.new_topic("after-load")
        from confluent_kafka import Producer as CkProducer

        producer = CkProducer({"bootstrap.servers": broker.kafka})
        producer.produce(topic, b"still serving", partition=0)
        assert producer.flush(30) == 0
        assert [r.rec.value for r in confluent_read(broker.kafka, topic, [0])] == [b"still serving"]
    finally:
        for w in conns:
            w.close()
