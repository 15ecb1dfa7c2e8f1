"""Topics, produce and fetch on a real cluster (3 brokers, real etcd), through gRPC, the client and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict

import grpc
import httpx
import pytest

from shared.client import Consumer, Producer, TopicPartition, partition_for_key
from shared.errors import ErrorCode, TidelogError
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.records.builder import encode_batch
from shared.records.decoder import iter_records
from tests.conftest import REPO, wait_for
from tests.integration.etcd_probe import set_topic_configs


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def brokers_by_id(cluster) -> dict[int, str]:
    return {int(p.id): p.address for p in cluster.procs("broker")}


def leader_stub(cluster, admin, topic: str, partition: int = 0):
    """The leader's stub once it serves ``partition`` of a topic just created: until the broker learns of the
    topic it answers UNKNOWN_TOPIC_OR_PARTITION, and NOT_LEADER_OR_FOLLOWER until it leads it (as Kafka's
    brokers do, a moment after the controller answers). A fetch at offset 0 probes that without writing."""
    desc = admin.describe_topic(topic)
    leader = desc["partitions"][partition]["leader"]
    stub = pb_grpc.BrokerStub(grpc.insecure_channel(brokers_by_id(cluster)[leader]))
    not_yet = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    wait_for(lambda: fetch_raw(stub, topic, partition, 0).error_code not in not_yet, 30,
             what=f"broker {leader} leading {topic}-{partition}")
    return stub, leader


def produce_raw(stub, topic: str, partition: int, records: bytes, acks: int = -1) -> pb.ProducePartitionResponse:
    resp = stub.Produce(pb.ProduceRequest(acks=acks, timeout_ms=5000, topics=[
        pb.ProduceTopicData(name=topic, partitions=[pb.ProducePartitionData(partition=partition, records=records)])]), timeout=10)
    return resp.topics[0].partitions[0]


def fetch_raw(stub, topic: str, partition: int, offset: int, max_wait_ms: int = 0, min_bytes: int = 1) -> pb.FetchPartitionResponse:
    resp = stub.Fetch(pb.FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, topics=[
        pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)])]),
        timeout=30)
    return resp.topics[0].partitions[0]


def consume_all(bootstrap: str, topic: str, partitions: list[int], expected: int, timeout: float = 30) -> dict[int, list]:
    consumer = Consumer(bootstrap, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        got: dict[int, list] = defaultdict(list)
        deadline = time.monotonic() + timeout
        n = 0
        while n < expected and time.monotonic() < deadline:
            for r in consumer.poll(500):
                got[r.partition].append(r)
                n += 1
        return got
    finally:
        consumer.close()


def test_round_trip_across_partitions_with_keys_on_kafkas_partitions(env) -> None:
    cluster, bootstrap, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=6)
    keys = [f"user-{i}".encode() for i in range(60)]
    with Producer(bootstrap, linger_ms=2) as producer:
        futures = [(k, i, producer.send(topic, f"v{i}".encode(), key=k, headers=[("n", str(i).encode())]))
                   for i in range(600) for k in [keys[i % 60]]]
        producer.flush()
        metas = [(k, i, f.get(10)) for k, i, f in futures]
    for k, _, md in metas:
        assert md.partition == partition_for_key(k, 6)
    got = consume_all(bootstrap, topic, list(range(6)), 600)
    assert sum(len(v) for v in got.values()) == 600
    for p, recs in got.items():
        offsets = [r.offset for r in recs]
        assert offsets == list(range(len(recs))), "dense offsets, in order, exactly once"
        for r in recs:
            assert partition_for_key(r.key, 6) == p
            assert r.value == f"v{int(r.headers[0][1])}".encode()
            assert r.topic == topic and r.timestamp > 0
    # Each acknowledgement names the very record the consumer read at that partition and offset.
    assert len({(md.partition, md.offset) for _, _, md in metas}) == 600
    for _, i, md in metas:
        assert got[md.partition][md.offset].value == f"v{i}".encode()


def test_null_keys_stick_to_a_partition_per_batch_then_move_on_and_timestamps_survive(env) -> None:
    _, bootstrap, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=6)
    base = int(time.time() * 1000)
    stamps = [base - 5_000 + (i * 7919) % 10_000 for i in range(200)]  # out of order within each batch
    with Producer(bootstrap, batch_size=2048, linger_ms=50) as producer:
        futures = [producer.send(topic, b"%03d" % i + b"x" * 297, timestamp=stamps[i]) for i in range(200)]
        producer.flush()
        parts = [f.get(10).partition for f in futures]
    changes = sum(a != b for a, b in zip(parts, parts[1:], strict=False))
    assert len(set(parts)) > 1, "the sticky partition moves on when its batch fills"
    assert changes <= 200 // 5, "records stick to one partition per batch (6 of 300 B fit in 2 KiB)"
    got = consume_all(bootstrap, topic, list(range(6)), 200)
    records = [r for recs in got.values() for r in recs]
    assert sorted(int(r.value[:3]) for r in records) == list(range(200))
    assert all(r.key is None and r.timestamp == stamps[int(r.value[:3])] for r in records)


def test_acks_zero_and_one_and_compression(env) -> None:
    _, bootstrap, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=1)
    # acks=0 hears of no error: a write that reaches a broker which does not know yet that it leads the new
    # partition is dropped (as in Kafka). Wait until the leader answers for it (ListOffsets: leader only).
    # The metadata may not name the partition yet either (a CI run met UNKNOWN_TOPIC_OR_PARTITION): ask again.
    with Consumer(bootstrap) as c:
        def leader_answers() -> bool:
            try:
                return c.end_offsets([TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): 0}
            except TidelogError:
                return False
        wait_for(leader_answers, 30, what=f"the leader of {topic}-0 answering ListOffsets")
    for acks, comp in ((0, "none"), (1, "gzip"), ("all", "lz4"), (1, "zstd"), (1, "snappy")):
        with Producer(bootstrap, acks=acks, compression_type=comp) as p:
            for i in range(50):
                p.send(topic, f"{acks}-{comp}-{i}".encode())
    got = consume_all(bootstrap, topic, [0], 250)
    assert [r.value for r in got[0]][:50] == [f"0-none-{i}".encode() for i in range(50)]
    assert len(got[0]) == 250


def test_long_poll_returns_early_when_data_arrives_and_after_max_wait_otherwise(env) -> None:
    cluster, _, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=1)
    stub, _ = leader_stub(cluster, admin, topic)
    t0 = time.monotonic()
    empty = fetch_raw(stub, topic, 0, 0, max_wait_ms=600)
    waited = time.monotonic() - t0
    assert empty.error_code == 0 and empty.records == b"" and 0.55 <= waited < 3
    timer = threading.Timer(0.4, lambda: produce_raw(stub, topic, 0, encode_batch([(1, None, b"wake", None)])))
    timer.start()
    t0 = time.monotonic()
    got = fetch_raw(stub, topic, 0, 0, max_wait_ms=10_000)
    waited = time.monotonic() - t0
    timer.join()
    assert [r.value for r in iter_records(got.records)] == [b"wake"]
    assert 0.3 <= waited < 3, waited


def test_out_of_range_unknown_topic_and_not_leader(env) -> None:
    cluster, _, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=1)
    stub, leader = leader_stub(cluster, admin, topic)
    assert produce_raw(stub, topic, 0, encode_batch([(1, None, b"x", None)] * 3)).error_code == 0
    assert fetch_raw(stub, topic, 0, 99).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert fetch_raw(stub, topic, 0, 3).error_code == 0  # the log end offset itself is fine: nothing yet
    assert fetch_raw(stub, "no-such-topic", 0, 0).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert produce_raw(stub, "no-such-topic", 0, encode_batch([(1, None, b"x", None)])).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert produce_raw(stub, topic, 7, encode_batch([(1, None, b"x", None)])).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    other = next(addr for bid, addr in brokers_by_id(cluster).items() if bid != leader)
    other_stub = pb_grpc.BrokerStub(grpc.insecure_channel(other))
    assert produce_raw(other_stub, topic, 0, encode_batch([(1, None, b"x", None)])).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fetch_raw(other_stub, topic, 0, 0).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    md = other_stub.Metadata(pb.MetadataRequest(topics=[topic, "no-such-topic"]))
    assert md.topics[0].partitions[0].leader == leader
    assert md.topics[1].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    bad_acks = stub.Produce(pb.ProduceRequest(acks=2, topics=[pb.ProduceTopicData(name=topic, partitions=[
        pb.ProducePartitionData(partition=0, records=encode_batch([(1, None, b"x", None)]))])]))
    assert bad_acks.topics[0].partitions[0].error_code == ErrorCode.INVALID_REQUIRED_ACKS


def test_a_request_of_many_small_batches_for_one_partition_is_appended_whole(env) -> None:
    """Kafka takes any number of uncompressed v2 batches for a partition in one request. The leader appends
    them as two buffers per batch; past 512 batches that was more than one ``writev`` takes (EINVAL)."""
    cluster, _, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=1)
    stub, _ = leader_stub(cluster, admin, topic)
    batches = [encode_batch([(1, None, b"v%d" % i, None)]) for i in range(1500)]
    r = produce_raw(stub, topic, 0, b"".join(batches))
    assert (r.error_code, r.base_offset) == (0, 0), r
    got: list[bytes] = []
    while len(got) < 1500:
        f = fetch_raw(stub, topic, 0, len(got))
        assert f.error_code == 0 and f.records
        got += [rec.value for rec in iter_records(f.records)]
    assert got == [b"v%d" % i for i in range(1500)]
    assert produce_raw(stub, topic, 0, batches[0]).base_offset == 1500


def test_corrupt_and_oversized_batches_are_rejected_and_the_log_is_untouched(env) -> None:
    cluster, _, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=1, configs={"max.message.bytes": 10_000})
    stub, _ = leader_stub(cluster, admin, topic)
    good = encode_batch([(1, b"k", b"good", None)])
    assert produce_raw(stub, topic, 0, good).base_offset == 0
    before = fetch_raw(stub, topic, 0, 0).records
    bad_crc = bytearray(encode_batch([(1, b"k", b"evil", None)]))
    bad_crc[-1] ^= 0xFF
    for payload in (bytes(bad_crc), good + bytes(bad_crc), good[:40], b"\x00" * 100, os.urandom(500), good + good[:10]):
        r = produce_raw(stub, topic, 0, payload)
        assert r.error_code == ErrorCode.CORRUPT_MESSAGE, r
        assert r.error_message
    big = encode_batch([(1, None, os.urandom(20_000), None)])
    assert produce_raw(stub, topic, 0, big).error_code == ErrorCode.MESSAGE_TOO_LARGE
    after = fetch_raw(stub, topic, 0, 0)
    assert after.records == before and after.high_watermark == 1
    assert produce_raw(stub, topic, 0, good).base_offset == 1  # and the partition still works


def test_malformed_produce_requests_fail_the_call_and_leave_the_broker_serving(env) -> None:
    """The broker reads produce requests by hand (shared.proto.produce_wire): bytes that are not a
    ProduceRequest fail that call with INVALID_ARGUMENT, on the unary method and on the stream, and
    nothing is written."""
    cluster, _, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=1)
    stub, leader = leader_stub(cluster, admin, topic)
    channel = grpc.insecure_channel(brokers_by_id(cluster)[leader])
    raw_unary = channel.unary_unary("/tidelog.v1.Broker/Produce")
    raw_stream = channel.stream_stream("/tidelog.v1.Broker/ProduceStream")
    good = pb.ProduceRequest(acks=1, timeout_ms=5000, topics=[pb.ProduceTopicData(name=topic, partitions=[
        pb.ProducePartitionData(partition=0, records=encode_batch([(1, b"k", b"v", None)]))])]).SerializeToString()
    garbage = [b"\xff" * 20, b"\x1a\x7f" + b"\x00" * 10, good[:-3], b"\x1a\x05\x0a\x03\xff\xfe\xfd",
               b"\x0f\x01"]
    for bad in garbage:
        with pytest.raises(grpc.RpcError) as err:
            raw_unary(bad, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, bad
        assert "malformed ProduceRequest" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            list(raw_stream(iter([good, bad, good]), timeout=10))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, bad
    # On each stream the good request ahead of the bad one was written and answered; the bad one
    # ended the stream, so the good one behind it was not read.
    written = fetch_raw(stub, topic, 0, 0).high_watermark
    assert written == len(garbage)
    assert all(r.value == b"v" for r in iter_records(fetch_raw(stub, topic, 0, 0).records))
    resp = pb.ProduceResponse.FromString(raw_unary(good, timeout=10))
    assert resp.topics[0].partitions[0].base_offset == written
    resp = pb.ProduceResponse.FromString(list(raw_stream(iter([good]), timeout=10))[0])
    assert resp.topics[0].partitions[0].base_offset == written + 1
    channel.close()


def test_list_offsets_earliest_latest_and_by_timestamp(env) -> None:
    _, bootstrap, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=1)
    with Producer(bootstrap) as p:
        for i in range(10):
            p.send(topic, b"x", timestamp=1_000_000 + i * 100)
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap) as c:
        c.assign([tp])
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 10}
        assert c.offsets_for_times({tp: 1_000_450}) == {tp: (5, 1_000_500)}
        assert c.offsets_for_times({tp: 9_000_000}) == {tp: None}
        c.seek(tp, 7)
        assert [r.offset for r in c.poll(5000)] == [7, 8, 9]
        assert c.position(tp) == 10
        c.seek_to_beginning(tp)
        assert c.position(tp) == 0


def test_many_producers_and_consumers_at_once_exactly_once_in_order(env) -> None:
    _, bootstrap, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=4)
    per_producer = 2000
    errors: list[BaseException] = []

    def run_producer(pid: int) -> None:
        try:
            with Producer(bootstrap, linger_ms=1, batch_size=4096) as p:
                for i in range(per_producer):
                    p.send(topic, f"{pid}:{i}".encode(), partition=i % 4)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    results: dict[int, dict[int, list]] = {}

    def run_consumer(cid: int, parts: list[int]) -> None:
        results[cid] = consume_all(bootstrap, topic, parts, 3 * per_producer * len(parts) // 4, timeout=60)

    producers = [threading.Thread(target=run_producer, args=(i,)) for i in range(3)]
    consumers = [threading.Thread(target=run_consumer, args=(0, [0, 1])), threading.Thread(target=run_consumer, args=(1, [2, 3]))]
    for t in producers + consumers:
        t.start()
    for t in producers + consumers:
        t.join(90)
    assert not errors
    seen = []
    for by_part in results.values():
        for p, recs in by_part.items():
            assert [r.offset for r in recs] == list(range(len(recs)))
            last: dict[str, int] = {}
            for r in recs:
                pid, i = r.value.decode().split(":")
                assert int(i) % 4 == p
                assert int(i) > last.get(pid, -1), "each producer's records stay in order within a partition"
                last[pid] = int(i)
                seen.append(r.value)
    assert sorted(seen) == sorted(f"{pid}:{i}".encode() for pid in range(3) for i in range(per_producer))


def test_rest_validation_errors(env) -> None:
    cluster, _, admin = env
    rest = cluster.rest
    topic = unique()
    ok = httpx.post(f"{rest}/v1/topics", json={"name": topic, "partitions": 2})
    assert ok.status_code == 201
    cases = [
        ({"name": topic}, 409, "TOPIC_ALREADY_EXISTS"),
        ({"name": "bad name!"}, 400, "INVALID_TOPIC_EXCEPTION"),
        ({"name": "x" * 250}, 400, "INVALID_TOPIC_EXCEPTION"),
        ({"name": topic.replace("-", ".")}, 201, None),
        ({"name": unique(), "configs": {"retention.ms": "soon"}}, 400, "INVALID_CONFIG"),
        ({"name": unique(), "configs": {"no.such.config": "1"}}, 400, "INVALID_CONFIG"),
        ({"name": unique(), "configs": {"cleanup.policy": "shred"}}, 400, "INVALID_CONFIG"),
        ({"name": unique(), "replication_factor": 9}, 400, "INVALID_REPLICATION_FACTOR"),
        ({"name": unique(), "partitions": 0}, 400, "INVALID_REQUEST"),
        ({"partitions": 1}, 400, "INVALID_REQUEST"),
        ({"name": unique(), "partitions": "many"}, 400, "INVALID_REQUEST"),
    ]
    for body, status, error in cases:
        r = httpx.post(f"{rest}/v1/topics", json=body)
        assert r.status_code == status, (body, r.text)
        if error:
            assert r.json()["error"] == error and r.json()["message"], r.text
    r = httpx.post(f"{rest}/v1/topics", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert httpx.get(f"{rest}/v1/topics/nope").status_code == 404
    assert httpx.delete(f"{rest}/v1/topics/nope").status_code == 404
    assert httpx.patch(f"{rest}/v1/topics/{topic}/configs", json={"configs": {"retention.ms": -5}}).status_code == 400
    assert httpx.post(f"{rest}/v1/topics/{topic}/partitions", json={"partitions": 1}).status_code == 400
    d = httpx.patch(f"{rest}/v1/topics/{topic}/configs", json={"configs": {"retention.ms": 60000}}).json()
    assert d["configs"]["retention.ms"] == 60000 and d["config_overrides"] == {"retention.ms": 60000}
    d = httpx.patch(f"{rest}/v1/topics/{topic}/configs", json={"configs": {"retention.ms": None}}).json()
    assert d["config_overrides"] == {} and d["configs"]["retention.ms"] == 604_800_000
    d = httpx.post(f"{rest}/v1/topics/{topic}/partitions", json={"partitions": 5}).json()
    assert len(d["partitions"]) == 5
    # writes through either controller: the standby forwards to the active one
    for url in cluster.info["rest_urls"]:
        name = unique()
        assert httpx.post(f"{url}/v1/topics", json={"name": name}).status_code == 201
        assert name in httpx.get(f"{url}/v1/topics").json()["topics"]


def test_delete_topic_removes_logs_and_recreate_starts_empty(env) -> None:
    cluster, bootstrap, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=3)
    with Producer(bootstrap) as p:
        for i in range(30):
            p.send(topic, b"old", partition=i % 3)
    dirs = lambda: [d for p in cluster.procs("broker")  # noqa: E731
                    for d in os.listdir(os.path.join(cluster.info["data_dir"], f"broker-{p.id}")) if d.startswith(topic + "-")]
    wait_for(lambda: len(dirs()) == 3, 10, what="partition dirs")
    admin.delete_topic(topic)
    wait_for(lambda: not dirs(), 10, what="partition dirs deleted")
    admin.create_topic(topic, partitions=1)
    with Producer(bootstrap) as p:
        assert p.send(topic, b"new").get(10).offset == 0


def test_cli_topics_produce_consume(env) -> None:
    cluster, _, _ = env
    topic = unique("cli")
    base = [sys.executable, "-m", "shared.cli.main"]
    dd = ["--data-dir", cluster.info["data_dir"]]

    def run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(base + args + dd, input=stdin, capture_output=True, text=True, timeout=60, cwd=REPO)

    r = run(["topics", "create", topic, "--partitions", "2", "--config", "retention.ms=3600000"])
    assert r.returncode == 0, r.stderr
    assert topic in run(["topics", "list"]).stdout
    d = run(["topics", "describe", topic])
    assert "PartitionCount: 2" in d.stdout and "retention.ms=3600000" in d.stdout
    r = run(["produce", topic, "--key-separator", ":"], stdin="k1:hello\nk2:world\nk1:again\n")
    assert r.returncode == 0 and "3 records sent" in r.stderr, r.stderr
    r = run(["consume", topic, "--from-beginning", "--max-messages", "3", "--print-key"])
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["k1\tagain", "k1\thello", "k2\tworld"]
    p = partition_for_key(b"k1", 2)
    in_p = [v for k, v in (("k1", "hello"), ("k2", "world"), ("k1", "again")) if partition_for_key(k.encode(), 2) == p]
    r = run(["consume", topic, "--partition", str(p), "--offset", "1", "--max-messages", "1"])
    assert r.stdout.strip() == in_p[1]
    r = run(["consume", topic, "--timeout-ms", "500"])  # from the end: nothing, exits when idle
    assert r.returncode == 0 and r.stdout == ""
    bad = run(["topics", "create", "bad name"])
    assert bad.returncode == 1 and "illegal" in bad.stderr
    bad = run(["topics", "create", topic + "x", "--config", "novalue"])
    assert bad.returncode == 2 and "key=value" in bad.stderr
    r = run(["topics", "delete", topic])
    assert r.returncode == 0 and topic not in run(["topics", "list"]).stdout


def test_bench_commands_report_what_they_moved(env) -> None:
    """`tidelog bench produce|consume` on a small topic: the JSON reports the records, rates and latency
    percentiles, the steady state after --warmup-records, and the consumer reads back what was sent."""
    cluster, bootstrap, admin = env
    topic = unique("bench")
    base = [sys.executable, "-m", "shared.cli.main", "bench"]

    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(base + args + ["--bootstrap-server", bootstrap, "--no-progress"],
                              capture_output=True, text=True, timeout=120, cwd=REPO)

    r = run(["produce", "--topic", topic, "--records", "3000", "--record-size", "100", "--partitions", "2",
             "--latency-sample", "10", "--warmup-records", "1000", "--json"])
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["records"] == 3000 and res["records_per_s"] > 0 and res["mb_per_s"] > 0
    lat = res["latency_ms"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["max"]
    steady = res["steady_state"]
    assert steady["records"] == 2000 and 0 < steady["seconds"] <= res["seconds"]
    assert 0 < steady["latency_ms"]["p50"] <= steady["latency_ms"]["max"]
    assert len(admin.describe_topic(topic)["partitions"]) == 2
    r = run(["consume", "--topic", topic, "--records", "3000", "--json"])
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["records"] == 3000 and res["mb_per_s"] * res["seconds"] * 1e6 == pytest.approx(3000 * 116)
    r = run(["produce", "--topic", topic, "--records", "10"])  # the text report
    assert r.returncode == 0 and "10 records sent" in r.stdout and "99th" in r.stdout
    bad = run(["produce", "--topic", topic, "--records", "10", "--warmup-records", "10"])
    assert bad.returncode == 2 and "--warmup-records" in bad.stderr
    bad = run(["consume", "--topic", topic, "--records", "0"])
    assert bad.returncode == 2 and "--records" in bad.stderr


def test_fetch_stream_incremental_requests_continue_where_the_last_response_ended(env) -> None:
    c, _, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=1)
    stub, _ = leader_stub(c, admin, topic)
    for b in range(10):  # ten batches of 100 records, each ~10 KiB
        assert produce_raw(stub, topic, 0, encode_batch([(i, None, b"%d-%d" % (b, i) + b"x" * 100, None) for i in range(100)]),
                           acks=1).error_code == 0

    def req(offset: int, incremental: bool) -> pb.FetchRequest:
        return pb.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, incremental=incremental, topics=[
            pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=25_000)])])

    # Five requests sent at once: one explicit, four incremental (their fetch_offset, 0, is ignored).
    responses = [r.topics[0].partitions[0] for r in stub.FetchStream(iter([req(0, False)] + [req(0, True)] * 4), timeout=30)]
    assert [p.error_code for p in responses] == [0] * 5
    offsets = [r.offset for p in responses for r in iter_records(p.records)]
    assert offsets == list(range(len(offsets))) and len(offsets) >= 500  # contiguous, nothing twice
    for prev, nxt in zip(responses, responses[1:]):
        assert nxt.fetch_offset == prev.next_offset > prev.fetch_offset
    # An explicit request repositions the stream; incremental ones continue from there.
    # A unary Fetch has no session: incremental is ignored and fetch_offset is used.
    responses = [r.topics[0].partitions[0] for r in stub.FetchStream(iter([req(350, False), req(0, True)]), timeout=30)]
    assert responses[0].fetch_offset == 350 and responses[1].fetch_offset == responses[0].next_offset
    assert next(iter_records(responses[0].records)).offset == 300  # whole batches, from the one holding 350
    assert stub.Fetch(req(700, True), timeout=30).topics[0].partitions[0].fetch_offset == 700
    # An error drops the stream's position; the next incremental request uses its own fetch_offset.
    responses = [r.topics[0].partitions[0] for r in stub.FetchStream(iter([req(5000, False), req(900, True)]), timeout=30)]
    assert responses[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert responses[1].error_code == 0 and responses[1].fetch_offset == 900 and responses[1].next_offset == 1000


def test_consumer_seeks_while_fetches_are_in_flight(env) -> None:
    _, bootstrap, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=2)
    with Producer(bootstrap, linger_ms=5, batch_size=16_384) as p:
        for i in range(20_000):
            p.send(topic, b"%d" % i + b"." * 200, partition=i % 2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", max_partition_fetch_bytes=32_768, fetch_depth=4,
                        max_poll_records=300)
    try:
        consumer.assign(tps)
        rng = __import__("random").Random(7)
        for _ in range(30):
            got = consumer.poll(2000)
            assert got, "records keep coming after a seek"
            for tp in tps:
                recs = got.records(tp)
                if recs:
                    assert [r.offset for r in recs] == list(range(recs[0].offset, recs[0].offset + len(recs)))
                    assert all(int(r.value.split(b".")[0]) == 2 * r.offset + tp.partition for r in recs)
                    assert consumer.position(tp) == recs[-1].offset + 1
            tp = rng.choice(tps)
            target = rng.randrange(0, 10_000)
            consumer.seek(tp, target)
            first = None
            deadline = time.monotonic() + 10
            while first is None and time.monotonic() < deadline:
                for r in consumer.poll(500).records(tp):
                    first = r
                    break
            assert first is not None and first.offset == target, "the first record after a seek is the one sought"
    finally:
        consumer.close()


def test_a_caught_up_consumer_keeps_one_long_poll_in_flight_so_seeks_are_not_held_up(env) -> None:
    _, bootstrap, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=1)
    with Producer(bootstrap, linger_ms=1) as p:
        for i in range(50):
            p.send(topic, b"%d" % i, partition=0)
    tp = TopicPartition(topic, 0)
    # Long polls of 2 s: with four in flight while idle, a seek would wait up to 8 s for the stream to drain.
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=2000, fetch_depth=4)
    try:
        consumer.assign([tp])
        n = 0
        while n < 50:
            n += len(consumer.poll(2000))
        assert not consumer.poll(2500), "caught up: nothing more to read"
        consumer.seek(tp, 10)
        got = consumer.poll(5000).records(tp)
        assert got and got[0].offset == 10 and got[0].value == b"10"
    finally:
        consumer.close()


def test_idempotent_producer_recovers_after_the_broker_refuses_a_batch(env) -> None:
    """A refused batch was not written, so its sequence numbers are given back and the batches behind it
    (already numbered, some in flight) are renumbered; otherwise they would all be out of order."""
    _, bootstrap, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=1, replication_factor=3, configs={"max.message.bytes": 3000})
    with Producer(bootstrap, acks="all", linger_ms=0, batch_size=600, max_request_size=1 << 20) as p:
        before = [p.send(topic, b"a%d" % i + b"." * 200) for i in range(5)]
        big = p.send(topic, b"x" * 5000)  # a batch of its own, above max.message.bytes
        after = [p.send(topic, b"b%d" % i + b"." * 200) for i in range(40)]
        assert [f.get(30).offset for f in before] == list(range(5))
        with pytest.raises(TidelogError) as err:
            big.get(30)
        assert err.value.code == ErrorCode.MESSAGE_TOO_LARGE
        assert [f.get(30).offset for f in after] == list(range(5, 45))
    got = consume_all(bootstrap, topic, [0], 45)[0]
    assert [r.value.split(b".")[0] for r in got] == [b"a%d" % i for i in range(5)] + [b"b%d" % i for i in range(40)]


def test_not_enough_replicas_is_retried_with_the_same_producer_id_and_reported_early(env, caplog) -> None:
    """NOT_ENOUGH_REPLICAS is checked before the append: a definite refusal. The producer retries it
    until delivery_timeout_ms, logs the broker's message on the first refusal, and when the batch
    expires gives its sequence numbers back instead of taking a new producer id."""
    cluster, bootstrap, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=1, replication_factor=3)
    # The controller refuses min.insync.replicas above the replication factor; a topic written by an older
    # version can still hold it: put the override straight into etcd. The broker must refuse acks=all.
    set_topic_configs(cluster.info["etcd"], cluster.info["cluster"], topic, {"min.insync.replicas": 4})
    # Wait until the leader applies it: plain acks=all probes until one is refused (any accepted before that
    # is counted: the offsets below start after them; almost always none).
    stub, _ = leader_stub(cluster, admin, topic)
    probes = wait_for(lambda: _probe_refused(stub, topic), 15, what="the leader refusing acks=all")
    accepted_probes = [b"probe"] * probes.count(0)
    with Producer(bootstrap, acks="all", linger_ms=0, request_timeout_ms=2000, delivery_timeout_ms=3000) as p:
        refused = p.send(topic, b"refused")
        wait_for(lambda: any("NOT_ENOUGH_REPLICAS" in r.getMessage() and "min.insync.replicas=4" in r.getMessage()
                             for r in caplog.records), 2.5, what="a log line naming the broker's refusal")
        assert not refused.done()
        pid = p.producer_id
        with pytest.raises(TidelogError, match="NOT_ENOUGH_REPLICAS"):
            refused.get(10)
        admin.alter_configs(topic, {"min.insync.replicas": 2})
        md = p.send(topic, b"accepted").get(20)
        assert (md.offset, p.producer_id) == (len(accepted_probes), pid), "same producer id; the refused batch's numbers were reused"
    assert not any("taking a new producer id" in r.getMessage() for r in caplog.records)
    got = consume_all(bootstrap, topic, [0], len(accepted_probes) + 1)[0]
    assert [r.value for r in got] == [*accepted_probes, b"accepted"]


_PROBES: dict[str, list[int]] = defaultdict(list)


def _probe_refused(stub, topic: str) -> list[int] | None:
    """One acks=all produce of a plain record; the error codes seen so far once one is NOT_ENOUGH_REPLICAS
    (0: appended; others, e.g. NOT_LEADER_OR_FOLLOWER while the new partition opens: nothing written)."""
    code = produce_raw(stub, topic, 0, encode_batch([(1, None, b"probe", None)])).error_code
    _PROBES[topic].append(code)
    return _PROBES[topic] if code == ErrorCode.NOT_ENOUGH_REPLICAS else None


def test_forking_a_subprocess_while_clients_are_busy(env) -> None:
    """PySpark starts its JVM with Popen(preexec_fn=...), which forks. With gRPC's fork handlers on,
    a child forked while a client thread was inside a gRPC call could abort before exec
    (grpc/grpc#43055); shared/__init__.py turns them off."""
    _, bootstrap, admin = env
    topic = unique()
    admin.create_topic(topic, partitions=1)
    stop = threading.Event()
    with Producer(bootstrap, acks=1, linger_ms=0) as producer, Consumer(bootstrap) as consumer:
        consumer.assign([TopicPartition(topic, 0)])

        def busy() -> None:
            while not stop.is_set():
                producer.send(topic, b"x")
                consumer.poll(5)

        worker = threading.Thread(target=busy, daemon=True)
        worker.start()
        try:
            codes = [subprocess.run(["true"], preexec_fn=lambda: None, check=False, timeout=20).returncode
                     for _ in range(60)]
        finally:
            stop.set()
            worker.join(5)
    assert codes == [0] * 60
