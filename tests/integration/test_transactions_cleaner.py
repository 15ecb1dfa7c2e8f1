"""The cleaner and the aborted-transaction index, with real processes: a broker, a cleaner worker, and the
test playing the transaction coordinator (as test_compaction_transactions.py). After cleaning, each
cleaned segment's ``.txnindex`` lists only aborts whose data is still in the log (an aborted batch the
cleaner keeps empty as its producer's last batch), a read_committed reader sees exactly the committed
records, and both still hold after a kill -9 and restart of the broker (recovery)."""

from __future__ import annotations

import glob
import os
import signal
import uuid

import grpc

from services.broker.log.txn_index import decode
from services.broker.txn_state import AbortedTxn
from shared.client import Admin
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.records.builder import encode_batch
from shared.records.header import BatchHeader, iter_batches
from tests.conftest import wait_for
from tests.integration.test_compaction_transactions import (
    COMPACT,
    ENV,
    KEYS,
    T0,
    Txn,
    by_key,
    log_status,
    pad,
    produce,
    read,
    status,
)


def on_disk(directory: str) -> tuple[list[AbortedTxn], list[BatchHeader]]:
    """Every ``.txnindex`` entry and every batch header of the log's segment files."""
    entries: list[AbortedTxn] = []
    for path in sorted(glob.glob(os.path.join(directory, "*.txnindex"))):
        with open(path, "rb") as f:
            entries.extend(decode(f.read()))
    headers: list[BatchHeader] = []
    for path in sorted(glob.glob(os.path.join(directory, "*.log"))):
        with open(path, "rb") as f:
            headers.extend(h for _, h in iter_batches(f.read(), validate=False))
    return entries, headers


def covers_data(e: AbortedTxn, headers: list[BatchHeader]) -> bool:
    return any(h.producer_id == e.producer_id and h.is_transactional and not h.is_control
               and e.first_offset <= h.base_offset and h.last_offset < e.last_offset for h in headers)


def test_cleaned_segments_index_only_live_aborts_and_recovery_agrees(make_cluster) -> None:
    c = make_cluster(controllers=1, brokers=1, cleaners=1, coordinators=1, quotas=0, extra_env=ENV)
    broker = c.procs("broker")[0].address
    admin = Admin(broker)
    topic = f"txidx-{uuid.uuid4().hex[:6]}"
    directory = os.path.join(c.info["data_dir"], "broker-1", f"{topic}-0")
    expected: dict[bytes, bytes] = {}
    try:
        admin.create_topic(topic, partitions=1, replication_factor=1, configs=COMPACT)
        stub = pb_grpc.BrokerStub(grpc.insecure_channel(broker))
        cleaner = c.procs("cleaner")[0]
        os.kill(cleaner.pid, signal.SIGSTOP)  # everything is written before the first cleaning
        try:
            # one long-lived producer alternates aborted and committed transactions: its aborted batches
            # are not its last, so the cleaner removes them and their index entries must go
            steady = Txn(stub, topic)
            last_aborts: list[Txn] = []
            for i in range(8):
                steady.send([(k, pad(b"aborted-%d-%s" % (i, k))) for k in KEYS])
                steady.end(commit=False)
                values = {k: pad(b"committed-%d-%s" % (i, k)) for k in KEYS}
                steady.send(list(values.items()))
                steady.end(commit=True)
                expected.update(values)
                if i % 3 == 0:  # a producer whose only batch is aborted: kept empty, its entry stays
                    once = Txn(stub, topic)
                    once.send([(k, pad(b"aborted-once-%d-%s" % (i, k))) for k in KEYS[:4]])
                    once.end(commit=False)
                    last_aborts.append(once)
            for i in range(12):  # roll segments well past every marker
                values = {k: pad(b"plain-%d-%s" % (i, k)) for k in KEYS}
                end = produce(stub, topic, encode_batch([(T0, k, v, ()) for k, v in values.items()])) + len(KEYS)
                expected.update(values)
        finally:
            os.kill(cleaner.pid, signal.SIGCONT)
        before, _ = on_disk(directory)
        assert {e.producer_id for e in before} == {steady.pid} | {t.pid for t in last_aborts}
        assert len(before) == 8 + len(last_aborts)
        last_marker = max(e.last_offset for e in before)
        wait_for(lambda: log_status(broker, topic).first_dirty > last_marker, 30,
                 what="a cleaning past every abort marker")
        assert status(broker).jobs_refused == 0

        def check() -> None:
            entries, headers = on_disk(directory)
            assert not [h for h in headers if h.producer_id == steady.pid and not h.is_control
                        and h.base_offset < last_marker and h.records_count and _aborted(h, before)]
            assert all(covers_data(e, headers) for e in entries), entries  # only live aborted ranges
            assert {e.producer_id for e in entries} == {t.pid for t in last_aborts}  # the steady one's went
            assert by_key(read(broker, topic, "read_committed", end)) == expected
            uncommitted = read(broker, topic, "read_uncommitted", end)
            assert not [r for r in uncommitted if r.offset < last_marker and r.value.startswith(b"aborted-")]

        check()
        # kill -9 and restart: recovery reopens the cleaned segments (and rebuilds what it replays)
        proc = c.proc("broker", 1)
        os.kill(proc.pid, signal.SIGKILL)
        wait_for(lambda: proc.popen.poll() is not None, 10, what="the broker gone")
        c.restart("broker", 1)
        check()
    finally:
        admin.close()


def _aborted(h: BatchHeader, entries: list[AbortedTxn]) -> bool:
    return any(e.producer_id == h.producer_id and e.first_offset <= h.base_offset < e.last_offset for e in entries)
