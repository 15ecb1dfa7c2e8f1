"""No batch a client sends can make a partition unreadable (issue 13), on a real 1-broker cluster.

A Hypothesis fuzzer mutates valid batches (bit flips, truncations, length and count lies, attribute
bits, codec bytes, garbage records under a correct CRC) and produces them: every answer is a clean
error code or an append that reads back; the broker stays up; after a restart, recovery finds every
log valid. Then a poison batch written straight into a stopped broker's segment: every reader names
topic, partition and offset, after handing out the records before it.
"""

from __future__ import annotations

import glob
import os
import signal
import uuid
from collections import Counter

import grpc
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.tidelog_source.options import SourceOptions
from pipelines.tidelog_source.source import RangePartition, read_partition
from shared.cli.dump_log import describe_file
from shared.cli.main import cli
from shared.client import Admin, Consumer, TopicPartition
from shared.errors import ErrorCode, UnreadableBatchError
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.records.builder import encode_batch
from shared.records.compression import CompressionType
from shared.records.decoder import decode_batch
from shared.records.header import crc32c, iter_batches, pack_header
from tests.conftest import kill_cluster, start_cluster, wait_for

TS = 1_700_000_000_000
#: What a refused batch may be answered with.
CLEAN_ERRORS = {ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD, ErrorCode.INVALID_TIMESTAMP,
                ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.DUPLICATE_SEQUENCE_NUMBER}

BASES = [
    encode_batch([(TS + i, b"k%d" % i, b"value-%d" % i, None) for i in range(3)]),
    encode_batch([(TS + i % 3, None, b"v" * (i * 7), [("h", b"x")] if i % 2 else None) for i in range(20)]),
    encode_batch([(TS, b"key", os.urandom(40), None)] * 30, compression=CompressionType.GZIP),
    encode_batch([(TS + i, b"k", b"lz4" * 20, None) for i in range(5)], compression=CompressionType.LZ4),
]


def reseal(buf: bytearray) -> bytes:
    """Fix batchLength and the CRC after a mutation, so it reaches the record checks."""
    if len(buf) >= 61:
        buf[8:12] = (len(buf) - 12).to_bytes(4, "big", signed=True)
        buf[17:21] = crc32c(bytes(buf[21:])).to_bytes(4, "big")
    return bytes(buf)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    buf = bytearray(draw(st.sampled_from(BASES)))
    kind = draw(st.sampled_from(["flip", "truncate", "length", "count", "attributes", "codec", "garbage", "none"]))
    if kind == "flip":
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(buf) - 1))
            buf[i] ^= 1 << draw(st.integers(0, 7))
    elif kind == "truncate":
        buf = buf[:draw(st.integers(0, len(buf) - 1))]
    elif kind == "length":
        buf[8:12] = draw(st.integers(-(2**31), 2**31 - 1)).to_bytes(4, "big", signed=True)
    elif kind == "count":
        buf[23:27] = draw(st.integers(-5, 2000)).to_bytes(4, "big", signed=True)
        buf[57:61] = draw(st.integers(-5, 2000)).to_bytes(4, "big", signed=True)
    elif kind == "attributes":
        buf[21:23] = draw(st.integers(0, 0xFFFF)).to_bytes(2, "big")
    elif kind == "codec":
        buf[22] = (buf[22] & 0xF8) | draw(st.integers(0, 7))
    elif kind == "garbage":
        buf[61:] = draw(st.binary(min_size=0, max_size=300))
    out = reseal(buf) if kind != "length" and draw(st.booleans()) else bytes(buf)
    if draw(st.integers(0, 4)) == 0:  # behind a valid batch: all or nothing
        out = draw(st.sampled_from(BASES)) + out
    return out


def produce(stub: pb_grpc.BrokerStub, topic: str, records: bytes) -> pb.ProducePartitionResponse:
    resp = stub.Produce(pb.ProduceRequest(acks=1, timeout_ms=5000, topics=[pb.ProduceTopicData(
        name=topic, partitions=[pb.ProducePartitionData(partition=0, records=records)])]), timeout=10)
    return resp.topics[0].partitions[0]


def produce_when_led(stub: pb_grpc.BrokerStub, topic: str, records: bytes) -> int:
    """The error code of ``records`` produced to a topic just created. Until the broker learns of a new
    topic it refuses with UNKNOWN_TOPIC_OR_PARTITION, and until it leads it with NOT_LEADER_OR_FOLLOWER
    (as Kafka's brokers do, a moment after the controller answers); either way it appends nothing."""
    not_yet = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    return wait_for(lambda: [c] if (c := produce(stub, topic, records).error_code) not in not_yet else None, 30,
                    what=f"the broker leading {topic}")[0]


def fetch(stub: pb_grpc.BrokerStub, topic: str, offset: int) -> bytes:
    resp = stub.Fetch(pb.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, topics=[pb.FetchTopic(
        name=topic, partitions=[pb.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])]),
        timeout=10)
    return resp.topics[0].partitions[0].records


def partition_dir(cluster, topic: str) -> str:
    found = glob.glob(os.path.join(cluster.lc.data_dir, "broker-1", "**", f"{topic}-0"), recursive=True)
    assert len(found) == 1, found
    return found[0]


def stop_broker(cluster) -> None:
    """kill -9: the appended data is in the page cache; recovery on restart checks the segments."""
    proc = cluster.proc("broker", 1)
    os.kill(proc.pid, signal.SIGKILL)
    if proc.popen is not None:
        proc.popen.wait(30)


def read_whole_log(directory: str) -> int:
    """Every batch of every segment decodes; returns the number of records."""
    n = 0
    for path in sorted(glob.glob(os.path.join(directory, "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        for pos, h in iter_batches(data):
            n += len(decode_batch(data, pos)[1])
            pos += h.size
    return n


@pytest.fixture(scope="module")
def one_broker(tmp_path_factory):
    """One small cluster (1 broker, 1 controller) for the whole module: each test uses its own topics."""
    cluster = start_cluster(str(tmp_path_factory.mktemp("poison")), brokers=1, controllers=1, coordinators=0,
                            cleaners=0, quotas=0)
    address = cluster.procs("broker")[0].address
    admin = Admin(address)
    yield cluster, address, admin
    admin.close()
    kill_cluster(cluster)


def test_fuzzed_batches_get_a_clean_error_or_read_back_and_recovery_finds_the_log_valid(one_broker) -> None:
    cluster, address, admin = one_broker
    topic = f"fuzz-{uuid.uuid4().hex[:6]}"
    admin.create_topic(topic, partitions=1, configs={"max.message.bytes": 100_000})
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.BrokerStub(channel)
    assert produce_when_led(stub, topic, BASES[0]) == 0  # led before the first example: each refusal is its own
    accepted = [decode_batch(BASES[0])[0].records_count]
    refused: Counter[int] = Counter()

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(mutated())
    def one(batch: bytes) -> None:
        r = produce(stub, topic, batch)
        if r.error_code:
            assert r.error_code in CLEAN_ERRORS, (r.error_code, r.error_message)
            assert r.error_message
            refused[r.error_code] += 1
            return
        assert r.base_offset == accepted[0], "a refused payload appended something"
        data = fetch(stub, topic, r.base_offset)
        n = 0
        for pos, header in iter_batches(data):  # every batch of this append reads back
            records = decode_batch(data, pos)[1]
            assert len(records) == header.records_count and records[0].offset == r.base_offset + n
            n += len(records)
        accepted[0] += n

    one()
    channel.close()
    print("refused:", dict(refused), "accepted records:", accepted[0])
    assert refused[ErrorCode.CORRUPT_MESSAGE] and refused[ErrorCode.INVALID_RECORD]
    consumer = Consumer(address, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    got = 0
    while got < accepted[0]:
        got += len(consumer.poll(2000))  # raises if any batch were unreadable
    consumer.close()
    assert got == accepted[0] > 0
    directory = partition_dir(cluster, topic)
    stop_broker(cluster)
    assert read_whole_log(directory) == accepted[0]
    cluster.restart("broker", 1)
    stub = pb_grpc.BrokerStub(grpc.insecure_channel(address))
    wait_for(lambda: produce(stub, topic, BASES[0]).error_code == 0, 30, what="the restarted broker appends")
    assert read_whole_log(directory) == accepted[0] + 3  # recovery kept every batch


def test_the_topic_compression_type_is_applied_by_the_broker(one_broker) -> None:
    """compression.type=zstd: a gzip batch is stored recompressed with zstd (as Kafka's broker does); the
    records, timestamps and offsets are unchanged. ``producer`` keeps the producer's codec."""
    _, address, admin = one_broker
    stub = pb_grpc.BrokerStub(grpc.insecure_channel(address))
    for codec, expected in (("zstd", CompressionType.ZSTD), ("producer", CompressionType.GZIP)):
        topic = f"codec-{codec}-{uuid.uuid4().hex[:6]}"
        admin.create_topic(topic, partitions=1, configs={"compression.type": codec})
        sent = BASES[2]  # gzip
        assert produce_when_led(stub, topic, sent) == 0
        header, records = decode_batch(fetch(stub, topic, 0))
        assert header.compression == expected
        assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
            (r.offset, r.timestamp, r.key, r.value) for r in decode_batch(sent)[1]]


def poison(base_offset: int, count: int = 3) -> bytes:
    """A batch with a correct CRC over records no decoder can read (the broker refuses it over the wire)."""
    body = b"\x7f" * 64
    return pack_header(body, base_offset=base_offset, records_count=count, last_offset_delta=count - 1,
                       base_timestamp=TS, max_timestamp=TS, attributes=0, producer_id=-1, producer_epoch=-1,
                       base_sequence=-1, partition_leader_epoch=0) + body


def test_readers_name_the_batch_they_cannot_read(one_broker, tmp_path) -> None:
    cluster, address, admin = one_broker
    topic = f"poison-{uuid.uuid4().hex[:6]}"
    admin.create_topic(topic, partitions=1)
    stub = pb_grpc.BrokerStub(grpc.insecure_channel(address))
    assert produce_when_led(stub, topic, encode_batch([(TS + i, None, b"before-%d" % i, None) for i in range(5)])) == 0
    assert produce(stub, topic, poison(0)).error_code == ErrorCode.INVALID_RECORD  # never over the wire (Kafka: INVALID_RECORD under a good CRC)
    directory = partition_dir(cluster, topic)
    stop_broker(cluster)
    with open(os.path.join(directory, f"{0:020d}.log"), "ab") as f:
        f.write(poison(5))
    cluster.restart("broker", 1)
    stub = pb_grpc.BrokerStub(grpc.insecure_channel(address))
    wait_for(lambda: produce(stub, topic, encode_batch([(TS, None, b"after", None)])).error_code == 0, 30,
             what="the restarted broker appends after the poison batch")

    consumer = Consumer(address, auto_offset_reset="earliest")
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    before = wait_for(lambda: consumer.poll(500), 20, what="the records before the poison batch")
    assert [r.value for r in before] == [b"before-%d" % i for i in range(5)]
    for _ in range(2):  # raised again until the application seeks past it
        with pytest.raises(UnreadableBatchError) as err:
            wait_for(lambda: consumer.poll(500), 20, what="the poison batch")
        assert (err.value.topic, err.value.partition, err.value.offset) == (topic, 0, 5)
        assert f"offset 5 of {topic}-0" in str(err.value)
    consumer.seek(tp, 8)
    assert [r.value for r in wait_for(lambda: consumer.poll(500), 20, what="the record after")] == [b"after"]
    consumer.close()

    runner = CliRunner()
    run = runner.invoke(cli, ["consume", topic, "--from-beginning", "--timeout-ms", "3000", "--bootstrap-server",
                              address])
    assert run.exit_code != 0
    assert run.stdout.splitlines() == [f"before-{i}" for i in range(5)]
    assert f"offset 5 of {topic}-0" in run.stderr

    dump = runner.invoke(cli, ["dump-log", directory])
    assert dump.exit_code != 0
    assert "baseOffset: 5 lastOffset: 7" in dump.stdout and "| records error:" in dump.stdout
    assert "payload: after" in dump.stdout
    not_a_segment = tmp_path / "notes.log"
    not_a_segment.write_bytes(b"this is not a segment file\n" * 5)
    assert runner.invoke(cli, ["dump-log", str(not_a_segment)]).exit_code != 0
    assert [e for e in describe_file(str(not_a_segment)) if "error" in e]

    opts = SourceOptions(bootstrap_servers=address)
    with pytest.raises(UnreadableBatchError) as err:
        list(read_partition(opts, RangePartition(topic, 0, 0, 9)))
    assert (err.value.topic, err.value.partition, err.value.offset) == (topic, 0, 5)
    assert [b.num_rows for b in read_partition(opts, RangePartition(topic, 0, 8, 9))] == [1]
