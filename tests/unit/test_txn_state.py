"""The transaction state machine (services/coordinator/txn/state.py): ids, the transition table,
metadata <-> TransactionLogValue."""

from __future__ import annotations

import itertools

import pytest

from services.coordinator.txn.config import partition_for_transactional_id
from services.coordinator.txn.records import TxnLogValue, decode_value, encode_value
from services.coordinator.txn.state import (
    VALID_PREVIOUS,
    IllegalTransition,
    TxnMetadata,
    TxnState,
    can_transition,
    is_epoch_exhausted,
)
from shared.errors import CorruptRecordError
from shared.types import TopicPartition

S = TxnState

# Written out independently of the module: (from, to) pairs Kafka allows, and whether V1 may take them.
ALLOWED = {
    (S.EMPTY, S.EMPTY): True, (S.COMPLETE_COMMIT, S.EMPTY): True, (S.COMPLETE_ABORT, S.EMPTY): True,
    (S.EMPTY, S.ONGOING): True, (S.ONGOING, S.ONGOING): True, (S.COMPLETE_COMMIT, S.ONGOING): True,
    (S.COMPLETE_ABORT, S.ONGOING): True,
    (S.ONGOING, S.PREPARE_COMMIT): True,
    (S.ONGOING, S.PREPARE_ABORT): True, (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT): True,
    (S.EMPTY, S.PREPARE_ABORT): False, (S.COMPLETE_COMMIT, S.PREPARE_ABORT): False,
    (S.COMPLETE_ABORT, S.PREPARE_ABORT): False,
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT): True,
    (S.PREPARE_ABORT, S.COMPLETE_ABORT): True,
    (S.EMPTY, S.DEAD): True, (S.COMPLETE_COMMIT, S.DEAD): True, (S.COMPLETE_ABORT, S.DEAD): True,
    (S.ONGOING, S.PREPARE_EPOCH_FENCE): True,
}


def test_state_ids_are_kafkas() -> None:
    assert [(s.kafka_name, int(s)) for s in TxnState] == [
        ("Empty", 0), ("Ongoing", 1), ("PrepareCommit", 2), ("PrepareAbort", 3), ("CompleteCommit", 4),
        ("CompleteAbort", 5), ("Dead", 6), ("PrepareEpochFence", 7)]


@pytest.mark.parametrize(("old", "new"), sorted(ALLOWED))
def test_every_allowed_transition(old: TxnState, new: TxnState) -> None:
    assert can_transition(old, new, client_version=2)
    assert can_transition(old, new, client_version=1) is ALLOWED[(old, new)]


def test_every_other_transition_is_refused() -> None:
    refused = [(a, b) for a, b in itertools.product(TxnState, TxnState) if (a, b) not in ALLOWED]
    assert len(refused) == 64 - len(ALLOWED)
    for a, b in refused:
        assert not can_transition(a, b, 2), (a, b)
    # a sample, spelled out
    for a, b in [(S.PREPARE_COMMIT, S.PREPARE_ABORT), (S.PREPARE_ABORT, S.COMPLETE_COMMIT), (S.DEAD, S.EMPTY),
                 (S.EMPTY, S.PREPARE_COMMIT), (S.ONGOING, S.EMPTY), (S.ONGOING, S.DEAD),
                 (S.COMPLETE_COMMIT, S.COMPLETE_ABORT), (S.PREPARE_EPOCH_FENCE, S.COMPLETE_ABORT)]:
        assert not can_transition(a, b, 2)


def test_table_is_defined_once_and_complete() -> None:
    assert set(VALID_PREVIOUS) == set(TxnState)
    assert {(a, b) for b, prev in VALID_PREVIOUS.items() for a in prev} == set(ALLOWED)


def meta(state: TxnState = S.ONGOING, **kw: object) -> TxnMetadata:
    fields: dict[str, object] = dict(transactional_id="tx", producer_id=7, producer_epoch=3, timeout_ms=1000,
                                     state=state, last_update_ms=10)
    fields.update(kw)
    return TxnMetadata(**fields)  # type: ignore[arg-type]


def test_transition_refuses_what_the_table_refuses() -> None:
    with pytest.raises(IllegalTransition, match="PrepareCommit -> PrepareAbort"):
        meta(S.PREPARE_COMMIT).transition(S.PREPARE_ABORT)
    with pytest.raises(IllegalTransition, match="client transaction version 1"):
        meta(S.EMPTY, client_version=1).transition(S.PREPARE_ABORT)
    moved = meta(S.EMPTY).transition(S.PREPARE_ABORT, 2, producer_epoch=4)
    assert (moved.state, moved.producer_epoch, moved.client_version) == (S.PREPARE_ABORT, 4, 2)


def test_metadata_value_round_trip() -> None:
    m = meta(S.ONGOING, partitions=frozenset({TopicPartition("b", 1), TopicPartition("a", 3), TopicPartition("a", 0)}),
             start_ms=5, previous_producer_id=2, client_version=2)
    v = m.to_value()
    assert v.partitions == (("a", (0, 3)), ("b", (1,)))
    assert TxnMetadata.from_value("tx", decode_value(encode_value(v))) == m  # type: ignore[arg-type]


def test_empty_writes_null_partitions_and_transient_states_are_never_written() -> None:
    assert meta(S.EMPTY).to_value().partitions is None
    assert meta(S.COMPLETE_COMMIT).to_value().partitions == ()
    for s in (S.DEAD, S.PREPARE_EPOCH_FENCE):
        with pytest.raises(IllegalTransition):
            meta(s).to_value()


@pytest.mark.parametrize("status", [6, 7, 8, -1])
def test_loading_refuses_states_never_written(status: int) -> None:
    with pytest.raises(CorruptRecordError):
        TxnMetadata.from_value("tx", TxnLogValue(1, 0, 1000, status, (), 0, 0))


def test_epoch_exhaustion_is_kafkas() -> None:
    assert not is_epoch_exhausted(32765)
    assert is_epoch_exhausted(32766) and is_epoch_exhausted(32767)


def test_transactional_id_partition_is_kafkas_hash() -> None:
    assert partition_for_transactional_id("polygenelubricants") == 0  # hashCode Integer.MIN_VALUE
    assert partition_for_transactional_id("hello") == 99162322 % 50
