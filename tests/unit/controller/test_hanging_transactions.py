"""find-hanging's rule (Kafka's ``TransactionsCommand.FindHangingTransactionsCommand``), pure: an open
transaction older than transaction.max.timeout.ms is hanging unless its producer's transactional id has
a transaction at its coordinator that still includes the partition."""

from __future__ import annotations

from typing import Any

from services.controller.api.find_hanging_transactions import OpenTxn, candidates, hanging
from shared.types import TopicPartition

NOW = 10_000_000
MAX = 900_000  # 15 minutes


def producer(pid: int, start: int, last_ts: int, epoch: int = 0, coordinator_epoch: int = -1) -> dict[str, Any]:
    return {"producer_id": pid, "producer_epoch": epoch, "last_sequence": 3, "last_timestamp": last_ts,
            "coordinator_epoch": coordinator_epoch, "current_txn_start_offset": start}


def test_candidates_are_open_transactions_older_than_the_max_timeout() -> None:
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    found = candidates({
        tp0: [producer(1, 5, NOW - MAX - 1),        # open, too old: candidate
              producer(2, -1, NOW - 10 * MAX),      # no open transaction: never
              producer(3, 7, NOW - MAX)],           # exactly the timeout: not yet
        tp1: [producer(4, 0, -1, epoch=2, coordinator_epoch=3)],  # unknown last write: candidate
    }, NOW, MAX)
    assert found == [OpenTxn("t", 0, 1, 0, -1, 5, NOW - MAX - 1), OpenTxn("t", 1, 4, 2, 3, 0, -1)]


def test_a_zero_timeout_makes_every_open_transaction_a_candidate() -> None:
    found = candidates({TopicPartition("t", 0): [producer(1, 5, NOW - 1), producer(2, 9, NOW)]}, NOW, 0)
    assert [t.producer_id for t in found] == [1]


def _txn(pid: int, partition: int = 0) -> OpenTxn:
    return OpenTxn("t", partition, pid, 0, -1, 5, NOW - MAX - 1)


def test_no_transactional_id_for_the_producer_is_hanging() -> None:
    assert hanging([_txn(1)], {}, {}) == [_txn(1)]


def test_an_id_unknown_to_its_coordinator_is_hanging() -> None:
    assert hanging([_txn(1)], {1: "tx"}, {"tx": None}) == [_txn(1)]


def test_a_coordinator_transaction_that_includes_the_partition_is_not_hanging() -> None:
    d = {"tx": {"state": "Ongoing", "topic_partitions": ["t-0", "u-3"]}}
    assert hanging([_txn(1, 0)], {1: "tx"}, d) == []


def test_a_coordinator_transaction_without_the_partition_leaves_it_hanging() -> None:
    d = {"tx": {"state": "Ongoing", "topic_partitions": ["t-1"]}, "other": {"state": "CompleteAbort", "topic_partitions": []}}
    assert hanging([_txn(1, 0), _txn(1, 1), _txn(2, 0)], {1: "tx", 2: "other"}, d) == [_txn(1, 0), _txn(2, 0)]


def test_partition_names_are_not_confused_by_dashes_in_topics() -> None:
    t = OpenTxn("a-1", 0, 1, 0, -1, 5, 0)
    assert hanging([t], {1: "tx"}, {"tx": {"topic_partitions": ["a-1-0"]}}) == []
    assert hanging([t], {1: "tx"}, {"tx": {"topic_partitions": ["a-10"]}}) == [t]
