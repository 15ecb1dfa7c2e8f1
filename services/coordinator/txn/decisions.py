"""What the shard's request handlers return: the answer, the records to append and what to do
once they are committed. Pure values; the service layer applies them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from services.coordinator.txn.state import TxnState
from shared.errors import ErrorCode
from shared.types import TopicPartition

#: (key bytes, value bytes or None for a tombstone) of one __transaction_state record
Rec = tuple[bytes, bytes | None]


class ProducerIdAndEpoch(NamedTuple):
    producer_id: int
    epoch: int


@dataclass(frozen=True)
class MarkerPlan:
    """After a PrepareCommit/PrepareAbort is committed: write a COMMIT/ABORT marker with this producer
    id and epoch (and the coordinator epoch) to every partition, then ask ``TxnShard.complete``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]

    def topics(self) -> dict[str, list[int]]:
        """Partitions by topic, sorted (the shape of WriteTxnMarkers' ``topics``)."""
        out: dict[str, list[int]] = {}
        for tp in sorted(self.partitions):
            out.setdefault(tp.topic, []).append(tp.partition)
        return out


@dataclass(frozen=True)
class Decision:
    """One handler's verdict on one transactional id.

    ``error`` (and ``producer_id``/``producer_epoch``) is what the requester is told once
    ``records`` are committed and replayed -- at once when there are none. A decision may carry
    records and an error together: a fencing InitProducerId writes its abort and answers
    CONCURRENT_TRANSACTIONS so that the client retries. ``pending`` is the state the records move
    towards (``TxnShard.begin`` marks the id busy with it until they are replayed)."""

    transactional_id: str
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    records: tuple[Rec, ...] = ()
    producer_id: int = -1
    producer_epoch: int = -1
    pending: TxnState | None = None
    markers: MarkerPlan | None = None

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.NONE


#: Request versions below which clients do not know PRODUCER_FENCED (90) and are told
#: INVALID_PRODUCER_EPOCH (47) instead, as Kafka's KafkaApis does.
_FENCED_SINCE = {"InitProducerId": 4, "EndTxn": 2, "AddPartitionsToTxn": 2, "AddOffsetsToTxn": 2}


def for_request_version(error: ErrorCode, api: str, version: int) -> ErrorCode:
    """The error as a client speaking ``api`` at ``version`` understands it (Kafka-protocol listener)."""
    if error == ErrorCode.PRODUCER_FENCED and version < _FENCED_SINCE.get(api, 0):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error
