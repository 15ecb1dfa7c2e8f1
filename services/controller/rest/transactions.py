"""``/v1/transactions``: list, describe, the producers of a partition, find hanging transactions and
abort one — ``kafka-transactions.sh list|describe|describe-producers|find-hanging|abort``. Any controller
answers; each route translates onto its API (``services/controller/api``: ``describe_transactions``,
``find_hanging_transactions``, ``abort_transactions``), which asks the transaction coordinators and the
partition leaders. (``hanging`` and ``producers`` are routes, so a transactional id of that name is
described through the list's filters only.)"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from services.controller.api import abort_transactions as abort_api
from services.controller.api import describe_transactions as describe_api
from services.controller.api import find_hanging_transactions as hanging_api
from services.controller.api.abort_transactions import AbortTransaction
from services.controller.api.fields import INT32_MAX, INT64_MAX, NAME_MAX, TOPIC_NAME_MAX, TOPIC_NAME_PATTERN
from services.controller.rest.deps import Api, Ctx
from services.controller.rest.errors import PATH_NAME_PATTERN, error_responses

router = APIRouter(prefix="/v1/transactions", tags=["transactions"])

TransactionalId = Annotated[str, Path(description="the transactional id (transactional.id)", pattern=PATH_NAME_PATTERN,
                                      min_length=1, max_length=NAME_MAX)]
_TOPIC = {"pattern": TOPIC_NAME_PATTERN, "min_length": 1, "max_length": TOPIC_NAME_MAX}
_E503 = "No coordinator serves it right now (COORDINATOR_NOT_AVAILABLE): retry shortly"
_E404_TOPIC = "Unknown topic or partition (UNKNOWN_TOPIC_OR_PARTITION)"


@router.get("", summary="List the transactional ids of every coordinator (kafka-transactions.sh list)",
            responses=error_responses(400, e503=_E503))
async def list_transactions(
        c: Api, ctx: Ctx,
        state: list[str] = Query([], description="only these states (Empty, Ongoing, PrepareCommit, PrepareAbort, "
                                                 "CompleteCommit, CompleteAbort, Dead, PrepareEpochFence); repeatable"),
        producer_id: list[Annotated[int, Query(ge=0, le=INT64_MAX)]] = Query(
            [], description="only these producer ids; repeatable"),
        duration_ms: int = Query(-1, ge=-1, le=INT64_MAX, description="only transactions running longer than this (ms)"),
) -> dict[str, Any]:
    return await describe_api.list_transactions(c, ctx, describe_api.ListTransactions(state, producer_id, duration_ms))


@router.get("/hanging", summary="Find hanging transactions (kafka-transactions.sh find-hanging)",
            responses=error_responses(400, e404=_E404_TOPIC, e503=_E503))
async def find_hanging(
        c: Api, ctx: Ctx,
        topic: str | None = Query(None, description="search this topic's partitions", **_TOPIC),
        partition: int | None = Query(None, ge=0, le=INT32_MAX, description="only this partition (with topic)"),
        broker: int | None = Query(None, ge=0, le=INT32_MAX, description="search the partitions with a replica on this broker"),
        max_transaction_timeout_ms: int = Query(
            hanging_api.DEFAULT_MAX_TRANSACTION_TIMEOUT_MS, ge=0, le=INT64_MAX,
            description="transaction.max.timeout.ms: open transactions whose producer wrote last longer ago are "
                        "candidates (default 15 minutes)"),
) -> dict[str, Any]:
    return await hanging_api.find_hanging(c, ctx, hanging_api.FindHanging(topic, partition, broker, max_transaction_timeout_ms))


@router.get("/producers", summary="The active producers of a partition (kafka-transactions.sh describe-producers)",
            responses=error_responses(400, e404=_E404_TOPIC, e503=_E503))
async def describe_producers(
        c: Api, ctx: Ctx,
        topic: str = Query(..., description="the topic", **_TOPIC),
        partition: int = Query(..., ge=0, le=INT32_MAX, description="the partition"),
) -> dict[str, Any]:
    return await describe_api.describe_producers(c, ctx, describe_api.DescribeProducers(topic, partition))


@router.post("/abort", summary="Abort a hanging transaction: an ABORT marker at the partition's leader "
                               "(kafka-transactions.sh abort)",
             responses=error_responses(400, e404=_E404_TOPIC, e503=_E503))
async def abort(body: AbortTransaction, c: Api, ctx: Ctx) -> dict[str, Any]:
    return await abort_api.abort_transaction(c, ctx, abort_api.AbortTransactionRequest(body))


@router.get("/{transactional_id}", summary="Describe a transactional id (kafka-transactions.sh describe)",
            responses=error_responses(400, e404="Unknown transactional id (TRANSACTIONAL_ID_NOT_FOUND)", e503=_E503))
async def describe_transaction(transactional_id: TransactionalId, c: Api, ctx: Ctx) -> dict[str, Any]:
    return await describe_api.describe_transaction(c, ctx, describe_api.DescribeTransaction(transactional_id))
