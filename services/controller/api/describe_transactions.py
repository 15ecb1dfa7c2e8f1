"""ListTransactions (every coordinator's transactional ids, with Kafka's state, producer-id and duration
filters), DescribeTransactions for one id, and DescribeProducers of partitions (at their leaders): the
reads of ``kafka-transactions.sh list|describe|describe-producers``. Any controller answers; it asks the
coordinator instances and the brokers (``TxnAdmin``): TRANSACTIONAL_ID_NOT_FOUND,
COORDINATOR_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.controller.api import ControllerApi
from services.controller.api.transactions_admin import TxnAdmin
from services.controller.authz import Op, Res
from shared.errors import ErrorCode, TidelogError
from shared.request_context import RequestContext
from shared.security.access import access_of
from shared.types import TopicPartition

#: Kafka's transaction states (ListTransactions' state filters)
TXN_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
              "PrepareEpochFence")


@dataclass(frozen=True, slots=True)
class ListTransactions:
    states: list[str] = field(default_factory=list)
    producer_ids: list[int] = field(default_factory=list)
    duration_ms: int = -1  # -1: none; else only transactions running longer than this


@dataclass(frozen=True, slots=True)
class DescribeTransaction:
    transactional_id: str


@dataclass(frozen=True, slots=True)
class DescribeProducers:
    topic: str
    partition: int


def admin(c: ControllerApi) -> TxnAdmin:
    return TxnAdmin(c.store)


async def list_transactions(c: ControllerApi, ctx: RequestContext, request: ListTransactions) -> dict[str, Any]:
    """``{"transactions": [{"transactional_id", "coordinator", "producer_id", "state"}, ...]}``."""
    unknown = sorted(set(request.states) - set(TXN_STATES))
    if unknown:
        raise TidelogError(f"unknown transaction state(s) {unknown}; one of {list(TXN_STATES)}", code=ErrorCode.INVALID_REQUEST)
    rows = await admin(c).list_transactions(list(request.states), list(request.producer_ids), request.duration_ms)
    if (access := access_of(c)) is not None:  # only the ids the principal may DESCRIBE, as Kafka
        rows = [r for r in rows if access.allowed(ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, str(r.get("transactional_id", "")))]
    return {"transactions": rows}


async def describe_transaction(c: ControllerApi, ctx: RequestContext, request: DescribeTransaction) -> dict[str, Any]:
    """The id's coordinator, producer id and epoch, state, timeout, start time and partitions."""
    return await admin(c).describe(request.transactional_id)


async def describe_producers(c: ControllerApi, ctx: RequestContext, request: DescribeProducers) -> dict[str, Any]:
    """``{"topic", "partition", "active_producers": [{"producer_id", "producer_epoch", "last_sequence",
    "last_timestamp", "coordinator_epoch", "current_txn_start_offset"}]}`` from the partition's leader."""
    a = admin(c)
    tp = TopicPartition(request.topic, request.partition)
    await a.topic_partitions(tp.topic, tp.partition, None)  # UNKNOWN_TOPIC_OR_PARTITION
    producers = (await a.describe_producers([tp]))[tp]
    return {"topic": tp.topic, "partition": tp.partition, "active_producers": producers}
