"""Compaction of a log holding transactions, with real processes: a broker, a cleaner worker and the
test playing the transaction coordinator (WriteTxnMarkers through the broker's gRPC door, KIP-890's
partition verification off). The cleaner never cleans past an open transaction (the last stable
offset); once decided, aborted records are gone from the log (even read_uncommitted no longer sees
them), committed ones are compacted by key, and the read_committed view is what it was."""

from __future__ import annotations

import os
import signal
import time
import uuid

import grpc

from shared.client import Admin, Consumer, TopicPartition
from shared.errors import ErrorCode
from shared.proto import cleaner_pb2 as cpb
from shared.proto import cleaner_pb2_grpc as cgrpc
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.records.builder import encode_batch
from tests.conftest import wait_for

ENV = {"TIDELOG_LOG_CLEANER_BACKOFF_MS": "100", "TIDELOG_HOUSEKEEPING_INTERVAL_MS": "200",
       "TIDELOG_CONTROLLED_SHUTDOWN_ENABLE": "false", "TIDELOG_LOG_CLEANER_LEASE_MS": "2000",
       # the test plays the transaction coordinator: the broker does not ask a real one
       "TIDELOG_TRANSACTION_PARTITION_VERIFICATION_ENABLE": "false"}
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "16384", "min.cleanable.dirty.ratio": "0.01",
           "file.delete.delay.ms": "0"}
KEYS = [b"key-%02d" % i for i in range(20)]
COORDINATOR_EPOCH = 1
T0 = 1_700_000_000_000


def pad(value: bytes) -> bytes:
    return value.ljust(100, b".")


#: Refusals a client retries: the topic was just created and the broker has not opened its partition yet.
NOT_YET = {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER}


def produce(stub: pb_grpc.BrokerStub, topic: str, batch: bytes, transactional: bool = False) -> int:
    request = pb.ProduceRequest(acks=-1, timeout_ms=5000, transactional_id="t" if transactional else "",
                                topics=[pb.ProduceTopicData(name=topic, partitions=[
                                    pb.ProducePartitionData(partition=0, records=batch)])])
    deadline = time.monotonic() + 15
    while True:
        r = stub.Produce(request).topics[0].partitions[0]
        if r.error_code not in NOT_YET or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # refused, nothing appended: the same batch again, as a producer retries it
    assert r.error_code == 0, r
    return r.base_offset


class Txn:
    """One transaction of a fresh producer on partition 0, written through the broker's gRPC door."""

    def __init__(self, stub: pb_grpc.BrokerStub, topic: str) -> None:
        resp = stub.InitProducerId(pb.InitProducerIdRequest())
        assert resp.error_code == 0
        self.stub, self.topic, self.pid, self.seq = stub, topic, resp.producer_id, 0
        self.first: int | None = None

    def send(self, rows: list[tuple[bytes, bytes]]) -> None:
        batch = encode_batch([(T0, k, v, ()) for k, v in rows], producer_id=self.pid, producer_epoch=0,
                             base_sequence=self.seq, transactional=True)
        base = produce(self.stub, self.topic, batch, transactional=True)
        self.first = base if self.first is None else self.first
        self.seq += len(rows)

    def end(self, commit: bool) -> None:
        resp = self.stub.WriteTxnMarkers(pb.WriteTxnMarkersRequest(markers=[pb.WritableTxnMarker(
            producer_id=self.pid, producer_epoch=0, committed=commit, coordinator_epoch=COORDINATOR_EPOCH,
            topics=[pb.WritableTxnMarkerTopic(name=self.topic, partitions=[0])])]))
        assert resp.markers[0].topics[0].partitions[0].error_code == 0


def status(address: str) -> cpb.CleanerStatusResponse:
    with grpc.insecure_channel(address) as ch:
        return cgrpc.LogCleanerStub(ch).CleanerStatus(cpb.CleanerStatusRequest(), timeout=5)


def read(bootstrap: str, topic: str, isolation: str, end: int) -> list:
    with Consumer(bootstrap, isolation_level=isolation, auto_offset_reset="earliest") as c:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        out: list = []
        wait_for(lambda: out.extend(c.poll(300)) or c.position(tp) >= end, 20, what=f"{isolation} reader at {end}")
        return out


def by_key(records: list) -> dict[bytes, bytes | None]:
    return {r.key: r.value for r in records}


def rounds(stub: pb_grpc.BrokerStub, topic: str, tag: bytes, n: int, expected: dict[bytes, bytes]) -> int:
    """``n`` rounds, each a committed transaction and an aborted one over every key, then a plain batch;
    ``expected`` follows the committed values by key. Returns the log end offset."""
    end = 0
    for i in range(n):
        committed, aborted = Txn(stub, topic), Txn(stub, topic)
        values = {k: pad(b"committed-%s-%d-%s" % (tag, i, k)) for k in KEYS}
        committed.send([(k, values[k]) for k in KEYS[::2]])
        aborted.send([(k, pad(b"aborted-%s-%d-%s" % (tag, i, k))) for k in KEYS])
        committed.send([(k, values[k]) for k in KEYS[1::2]])
        committed.end(commit=True)
        aborted.end(commit=False)
        expected.update(values)
        key, value = KEYS[i % len(KEYS)], pad(b"plain-%s-%d" % (tag, i))
        end = produce(stub, topic, encode_batch([(T0, key, value, ())])) + 1
        expected[key] = value
    return end


def log_status(broker: str, topic: str) -> cpb.LogStatus:
    (found,) = [s for s in status(broker).logs if s.log == f"{topic}-0"]
    return found


def test_the_cleaner_drops_aborted_records_keeps_committed_ones_and_stops_at_the_lso(make_cluster) -> None:
    c = make_cluster(controllers=1, brokers=1, cleaners=1, coordinators=1, quotas=0, extra_env=ENV)
    broker = c.procs("broker")[0].address
    admin = Admin(broker)
    topic = f"ctxn-{uuid.uuid4().hex[:6]}"
    expected: dict[bytes, bytes] = {}
    try:
        admin.create_topic(topic, partitions=1, replication_factor=1, configs=COMPACT)
        stub = pb_grpc.BrokerStub(grpc.insecure_channel(broker))
        cleaner = c.procs("cleaner")[0]
        os.kill(cleaner.pid, signal.SIGSTOP)  # everything is written before the first cleaning
        try:
            rounds(stub, topic, b"A", 6, expected)
            hanging = Txn(stub, topic)  # open: the log is not cleanable past its first offset
            hanging.send([(k, pad(b"open-%s" % k)) for k in KEYS[:5]])
            rounds(stub, topic, b"B", 6, expected)
        finally:
            os.kill(cleaner.pid, signal.SIGCONT)
        assert hanging.first is not None
        done = wait_for(lambda: (s := status(broker)).jobs_done >= 1 and s, 20, what="a first cleaning")
        assert done.jobs_refused == 0 and not done.quarantined
        first = log_status(broker, topic)
        assert 0 < first.first_dirty <= first.first_uncleanable <= hanging.first
        time.sleep(0.5)  # no job may clean past the open transaction meanwhile
        assert log_status(broker, topic).first_uncleanable <= hanging.first
        uncommitted = read(broker, topic, "read_uncommitted", hanging.first + 1)
        below = [r for r in uncommitted if r.offset < first.first_dirty]
        assert below and not [r for r in below if r.value.startswith(b"aborted-")]
        assert [r for r in uncommitted if r.value.startswith(b"open-")]  # the open transaction's data is intact

        os.kill(cleaner.pid, signal.SIGSTOP)
        try:
            hanging.end(commit=False)
            rounds(stub, topic, b"C", 6, expected)  # roll segments past the abort marker
            end = produce(stub, topic, encode_batch([(T0, b"last", pad(b"last"), ())])) + 1
            expected[b"last"] = pad(b"last")
            view = by_key(read(broker, topic, "read_committed", end))
            assert view == expected
        finally:
            os.kill(cleaner.pid, signal.SIGCONT)
        second = wait_for(lambda: (s := log_status(broker, topic)).first_dirty > hanging.first and s, 20,
                          what="a cleaning past the decided transaction")
        assert status(broker).jobs_refused == 0
        cleaned_end = second.first_dirty
        uncommitted = read(broker, topic, "read_uncommitted", end)
        cleaned = [r for r in uncommitted if r.offset < cleaned_end]
        assert not [r for r in cleaned if r.value.startswith((b"aborted-", b"open-"))]  # aborted data gone
        keys = [r.key for r in cleaned]
        assert keys and len(keys) == len(set(keys)), "compacted by key: one record per key in the cleaned range"
        assert len(uncommitted) < end / 3
        assert by_key(read(broker, topic, "read_committed", end)) == view  # the read_committed view is unchanged
    finally:
        admin.close()
