"""KIP-890 on the produce path: before a transaction's first batch is appended to a partition, the leader
asks the transaction coordinator whether the partition is in that transaction (transactions V1: verify
only) or adds it there (V2: the client sends no AddPartitionsToTxn for data partitions). Only a confirmed
batch may open the producer's transaction on the partition (``TxnState.verified``), and a marker that
arrives meanwhile voids the confirmation: a late batch of an aborted transaction cannot start a hanging
transaction, the defect Jepsen found (KAFKA-17754's family).

The coordinator's errors become produce errors as Kafka's ``AddPartitionsToTxnManager`` maps them: while
the coordinator moves or loads (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS,
CONCURRENT_TRANSACTIONS) the batch gets the retriable NOT_ENOUGH_REPLICAS; a fenced producer gets
INVALID_PRODUCER_EPOCH; a partition not in the transaction TRANSACTION_ABORTABLE on Tidelog's gRPC door,
INVALID_TXN_STATE on Kafka produce versions that predate it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import grpc

from services.broker.replica_manager import ReplicaManager
from services.broker.replica_results import ProduceResult
from shared.errors import ErrorCode
from shared.proto import transactions_pb2 as tpb
from shared.proto import transactions_pb2_grpc as tpb_grpc
from shared.records.header import ATTR_TRANSACTIONAL, BatchHeader, peek_attributes
from shared.security.transport import aio_channel
from shared.txn_topic import TRANSACTION_STATE_TOPIC, txn_partition_for
from shared.types import TopicPartition

log = logging.getLogger(__name__)

RETRY_LATER = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS})
FENCED = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
                    ErrorCode.INVALID_PRODUCER_ID_MAPPING})
VERIFY_TIMEOUT_S = 10.0
RETRY_BACKOFF_S = 0.005  # add.partitions.to.txn.retry.backoff.ms (Kafka: 20; markers take ~2 ms here)
RETRY_MAX_S = 0.1  # add.partitions.to.txn.retry.backoff.max.ms


def produce_error(code: int, abortable_known: bool = True) -> ErrorCode:
    """The produce error for a coordinator's answer (Kafka's AddPartitionsToTxnManager)."""
    e = ErrorCode(code)
    if e in RETRY_LATER:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    if e in FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if e == ErrorCode.TRANSACTION_ABORTABLE and not abortable_known:
        return ErrorCode.INVALID_TXN_STATE
    return e if e in (ErrorCode.TRANSACTION_ABORTABLE, ErrorCode.INVALID_TXN_STATE) else ErrorCode.INVALID_TXN_STATE


class TxnVerifier:
    def __init__(self, rm: ReplicaManager, owners: Callable[[], dict[int, dict[str, Any]]]) -> None:
        self.rm = rm
        self.owners = owners
        self._stubs: dict[str, tpb_grpc.TransactionCoordinatorStub] = {}

    async def verify(self, transactional_id: str, version: int, data: list[tuple[TopicPartition, bytes]],
                     abortable_known: bool = True) -> dict[TopicPartition, ProduceResult]:
        """Refusals for the partitions whose transactional batch the coordinator did not confirm; every
        other partition may be appended (confirmed ones are marked on the partition)."""
        pending: dict[tuple[int, int], list[TopicPartition]] = {}
        for tp, records in data:
            part = self.rm.partitions.get(tp)
            if part is None or not part.verify_transactions or len(records) < 61:
                continue  # the append names what is wrong
            if not peek_attributes(records) & ATTR_TRANSACTIONAL:
                continue
            h = BatchHeader.parse(records, 0)
            if h.producer_id >= 0 and not part.producers.txn.may_open(h.producer_id, h.producer_epoch):
                pending.setdefault((h.producer_id, h.producer_epoch), []).append(tp)
        refused: dict[TopicPartition, ProduceResult] = {}
        for (pid, epoch), tps in pending.items():
            answers = await self._ask(transactional_id, pid, epoch, tps, version)
            # The previous transaction's markers are still being written (V2 answers EndTxn before them):
            # retry here briefly, as Kafka's add.partitions.to.txn.retry.backoff(.max).ms (20, 100 ms) do,
            # rather than send the producer back for its whole retry backoff.
            waited = 0.0
            while waited < RETRY_MAX_S and any(c == ErrorCode.CONCURRENT_TRANSACTIONS for c in answers.values()):
                await asyncio.sleep(RETRY_BACKOFF_S)
                waited += RETRY_BACKOFF_S
                answers = await self._ask(transactional_id, pid, epoch, tps, version)
            for tp in tps:
                code = answers.get(tp, ErrorCode.COORDINATOR_NOT_AVAILABLE)
                part = self.rm.partitions.get(tp)
                if code == ErrorCode.NONE and part is not None:
                    part.producers.txn.verified(pid, epoch)
                elif code != ErrorCode.NONE:
                    refused[tp] = ProduceResult(produce_error(code, abortable_known),
                                                f"{tp}: transaction coordinator answered {ErrorCode(code).name}")
        return refused

    async def _ask(self, transactional_id: str, pid: int, epoch: int, tps: list[TopicPartition],
                   version: int) -> dict[TopicPartition, int]:
        stub = self._stub_for(transactional_id)
        if stub is None:
            return {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in tps}
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        request = tpb.AddPartitionsToTxnRequest(
            transactional_id=transactional_id, producer_id=pid, producer_epoch=epoch, verify_only=version < 2,
            client_transaction_version=max(version, 1),
            topics=[tpb.TxnTopic(name=t, partitions=ps) for t, ps in topics.items()])
        try:
            resp = await stub.AddPartitionsToTxn(request, timeout=VERIFY_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            log.info("transaction verification failed", extra={"transactional_id": transactional_id,
                                                                "error": str(exc.code())})
            return {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in tps}
        if resp.error_code:
            return {tp: resp.error_code for tp in tps}
        return {TopicPartition(t.name, p.partition): p.error_code for t in resp.results for p in t.partitions}

    def _stub_for(self, transactional_id: str) -> tpb_grpc.TransactionCoordinatorStub | None:
        topic = self.rm.view.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None or not topic.assignment:
            return None
        owner = self.owners().get(txn_partition_for(transactional_id, len(topic.assignment)))
        address = str(owner.get("address", "")) if owner else ""
        if not address:
            return None
        stub = self._stubs.get(address)
        if stub is None:
            stub = self._stubs[address] = tpb_grpc.TransactionCoordinatorStub(aio_channel(address))
        return stub
