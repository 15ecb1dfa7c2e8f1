"""Transaction faults on real processes (2 brokers, 1 coordinator, real etcd), those of issue 22 item 7 that
``test_transactions_coordinator``/``test_transactions_client`` do not already cover:

- a transactional producer (a process: ``txn_worker stall``) SIGSTOPped past its transaction timeout, then
  SIGCONTed: the coordinator aborted its transaction (epoch bumped), its next send/commit fails as Kafka's
  would (fenced), and nothing it writes after waking is appended;
- KAFKA-17754: a delayed EndTxn of an earlier transaction (raw gRPC, transactions V2) can neither commit nor
  abort the producer's later transaction.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from shared.errors import ErrorCode
from shared.proto import tidelog_pb2 as pb
from shared.proto import transactions_pb2 as tpb
from shared.records.builder import encode_batch
from tests.conftest import kill_cluster, start_cluster, wait_for
from tests.integration.test_transactions_checker import Worker
from tests.integration.test_transactions_coordinator import CONTROL_ABORT, CONTROL_COMMIT, RETRIABLE, TxnClient

E = ErrorCode
TOPIC = "txf"
ENV = {"TIDELOG_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "200"}


@pytest.fixture(scope="module")
def txf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TxnClient]:
    c = start_cluster(str(tmp_path_factory.mktemp("txn-faults")), controllers=1, brokers=2, coordinators=1,
                      cleaners=0, quotas=0, extra_env=ENV)
    txc = TxnClient(c)
    try:
        txc.admin.create_topic(TOPIC, partitions=2, replication_factor=2)
        yield txc
    finally:
        txc.admin.close()
        kill_cluster(c)


def test_a_producer_stopped_past_its_timeout_is_aborted_and_refused(txf: TxnClient) -> None:
    w = Worker("stall", txf.bootstrap, "txf-stall", "--topics", TOPIC, "--transaction-timeout-ms", "2000",
               stdin=True)
    try:
        sent = wait_for(lambda: w.last("sent"), 40, what="the producer's first record")
        os.kill(w.proc.pid, signal.SIGSTOP)
        aborted = wait_for(lambda: (d := txf.describe("txf-stall")).state == "CompleteAbort" and d, 20,
                           what="the coordinator aborting the stopped producer's transaction")
        assert aborted.producer_epoch > sent["producer_epoch"]  # bumped: the stopped producer is fenced
        time.sleep(0.5)
        os.kill(w.proc.pid, signal.SIGCONT)
        w.tell("go")  # it sends stall-after and commits
        result = wait_for(lambda: w.last("result") or w.proc.poll() is not None, 40, what="the woken producer's commit")
        assert isinstance(result, dict), w.stderr()
        assert w.wait(20) == 0
    finally:
        if w.proc.poll() is None:
            os.kill(w.proc.pid, signal.SIGCONT)
            w.kill()
    # Kafka's: the producer was fenced by the coordinator's epoch bump (PRODUCER_FENCED or INVALID_PRODUCER_EPOCH,
    # fatal), or with transactions V2 told its transaction is gone (TRANSACTION_ABORTABLE)
    print("the stopped producer woke to", result)
    assert result["kind"] in ("fatal", "abortable"), result
    assert result["code"] in (E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_ABORTABLE,
                              E.INVALID_TXN_STATE), result
    assert result["state"] in ("FATAL_ERROR", "ABORTABLE_ERROR"), result
    log = txf.log(0, TOPIC)
    assert (-1, b"stall-after") not in log  # its write after waking was refused
    assert log.index((-1, b"stall-before")) < log.index((CONTROL_ABORT, None))
    assert (CONTROL_COMMIT, None) not in log
    assert txf.describe("txf-stall").state == "CompleteAbort"


def _produce_v2(txf: TxnClient, txn_id: str, partition: int, pid: int, epoch: int, seq: int, value: bytes) -> None:
    """A transactions-V2 batch: the leader adds the partition to the transaction itself (KIP-890 part 2)."""
    batch = encode_batch([(int(time.time() * 1000), None, value, None)], producer_id=pid, producer_epoch=epoch,
                         base_sequence=seq, transactional=True)

    def produced() -> bool:
        resp = txf.leader(partition, TOPIC).Produce(pb.ProduceRequest(
            acks=-1, timeout_ms=5000, transactional_id=txn_id, transaction_version=2, topics=[
                pb.ProduceTopicData(name=TOPIC, partitions=[pb.ProducePartitionData(partition=partition,
                                                                                    records=batch)])]),
            timeout=10).topics[0].partitions[0]
        assert resp.error_code in (0, E.NOT_LEADER_OR_FOLLOWER, E.CONCURRENT_TRANSACTIONS), resp
        return resp.error_code == 0
    wait_for(produced, 30, what=f"a V2 transactional batch in {TOPIC}-{partition}")


def _end_v2(txf: TxnClient, txn_id: str, pid: int, epoch: int, commit: bool) -> tpb.EndTxnResponse:
    return txf.call(txn_id, "EndTxn", tpb.EndTxnRequest(transactional_id=txn_id, producer_id=pid,
                                                        producer_epoch=epoch, committed=commit,
                                                        client_transaction_version=2),
                    retry=RETRIABLE - {E.CONCURRENT_TRANSACTIONS})


def test_a_delayed_end_txn_cannot_end_a_later_transaction(txf: TxnClient) -> None:
    """KAFKA-17754 (Jepsen's Bufstream analysis): T1's EndTxn(commit) is delivered again late, while T2 is open.
    With transactions V2 the epoch moved at T1's end, so the late copy (and a late abort) is fenced and T2 is
    untouched; T2 then aborts on its own and stays aborted."""
    txn_id = "txf-17754"
    pid, e = txf.init(txn_id)
    _produce_v2(txf, txn_id, 1, pid, e, 0, b"t1")
    first = _end_v2(txf, txn_id, pid, e, True)
    assert first.error_code == 0, first
    assert (first.producer_id, first.producer_epoch) == (pid, e + 1)  # V2: a new epoch for the next transaction
    wait_for(lambda: txf.describe(txn_id).state == "CompleteCommit", 20, what="T1 committed")
    _produce_v2(txf, txn_id, 1, pid, e + 1, 0, b"t2")  # T2 (sequence numbers restart with the epoch)
    before = txf.describe(txn_id)
    assert (before.state, before.producer_epoch) == ("Ongoing", e + 1)
    for commit in (True, False):  # the delayed EndTxn of T1, as a commit and as an abort
        late = _end_v2(txf, txn_id, pid, e, commit)
        assert late.error_code == E.PRODUCER_FENCED, late
        after = txf.describe(txn_id)
        assert (after.state, after.producer_epoch) == ("Ongoing", e + 1)
    assert _end_v2(txf, txn_id, pid, e + 1, False).error_code == 0  # T2 aborts
    assert _end_v2(txf, txn_id, pid, e, True).error_code == E.PRODUCER_FENCED
    wait_for(lambda: txf.describe(txn_id).state == "CompleteAbort", 20, what="T2 aborted")
    assert _end_v2(txf, txn_id, pid, e, True).error_code == E.PRODUCER_FENCED
    log = txf.log(1, TOPIC)
    i = log.index((-1, b"t1"))
    assert log[i:] == [(-1, b"t1"), (CONTROL_COMMIT, None), (-1, b"t2"), (CONTROL_ABORT, None)]
    assert txf.describe(txn_id).state == "CompleteAbort"
