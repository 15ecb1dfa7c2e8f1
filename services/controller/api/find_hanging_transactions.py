"""Find hanging transactions as ``kafka-transactions.sh find-hanging`` does: transactional data on a
partition with no transaction at the coordinator that will ever end it (a marker lost to a bug, or data
a producer wrote without the coordinator knowing). Such a transaction holds the partition's last stable
offset, so read_committed consumers stop there; ``abort`` ends it.

Kafka's rule (``TransactionsCommand.FindHangingTransactionsCommand``), pure below:

1. candidates: every producer with an open transaction on a searched partition (DescribeProducers'
   current transaction start offset) whose last write is older than ``transaction.max.timeout.ms`` (no
   legal transaction runs longer, so the coordinator would have aborted it by now);
2. the candidates' transactional ids: ListTransactions filtered by producer id;
3. a candidate is hanging if no transactional id has its producer id, if its id is unknown to its
   coordinator, or if the id's transaction (DescribeTransactions) does not include the partition — a
   coordinator still holding the partition in an Ongoing or Prepare* transaction will write its marker.

The search is bounded as Kafka's is: by ``topic`` (and ``partition``) or by ``broker`` (partitions with a
replica on it, asked at their leaders). INVALID_REQUEST without either.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from services.controller.api import ControllerApi
from services.controller.api.transactions_admin import TxnAdmin
from shared.errors import ErrorCode, TidelogError
from shared.request_context import RequestContext
from shared.types import TopicPartition

#: transaction.max.timeout.ms, Kafka's default (15 minutes): the search's default bound
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 15 * 60 * 1000


@dataclass(frozen=True, slots=True)
class OpenTxn:
    """A producer's open transaction on one partition (a row of find-hanging's output)."""
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int


@dataclass(frozen=True, slots=True)
class FindHanging:
    topic: str | None = None
    partition: int | None = None
    broker: int | None = None
    max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS


def candidates(producers: Mapping[TopicPartition, list[dict[str, Any]]], now_ms: int,
               max_transaction_timeout_ms: int) -> list[OpenTxn]:
    """Open transactions whose producer last wrote more than ``max_transaction_timeout_ms`` ago (an
    unknown last timestamp, -1, counts as long ago)."""
    out = []
    for tp in sorted(producers):
        for s in producers[tp]:
            start = int(s["current_txn_start_offset"])
            if start < 0 or now_ms - int(s["last_timestamp"]) <= max_transaction_timeout_ms:
                continue
            out.append(OpenTxn(tp.topic, tp.partition, int(s["producer_id"]), int(s["producer_epoch"]),
                               int(s["coordinator_epoch"]), start, int(s["last_timestamp"])))
    return out


def hanging(open_txns: list[OpenTxn], transactional_ids: Mapping[int, str],
            descriptions: Mapping[str, Mapping[str, Any] | None]) -> list[OpenTxn]:
    """The candidates no coordinator will end: ``transactional_ids`` maps producer id -> its id (from
    ListTransactions), ``descriptions`` id -> DescribeTransactions' answer (None: TRANSACTIONAL_ID_NOT_FOUND),
    with ``topic_partitions`` as ``"topic-partition"`` strings."""
    out = []
    for t in open_txns:
        txn_id = transactional_ids.get(t.producer_id)
        d = descriptions.get(txn_id) if txn_id is not None else None
        if d is None or f"{t.topic}-{t.partition}" not in set(d.get("topic_partitions", ())):
            out.append(t)
    return out


async def find_hanging(c: ControllerApi, ctx: RequestContext, request: FindHanging) -> dict[str, Any]:
    """``{"max_transaction_timeout_ms", "hanging": [{"topic", "partition", "producer_id", "producer_epoch",
    "coordinator_epoch", "start_offset", "last_timestamp", "duration_ms"}]}``."""
    if request.topic is None and request.broker is None:
        raise TidelogError("find-hanging needs a topic or a broker to bound the search", code=ErrorCode.INVALID_REQUEST)
    if request.partition is not None and request.topic is None:
        raise TidelogError("a partition needs its topic", code=ErrorCode.INVALID_REQUEST)
    a = TxnAdmin(c.store)
    tps = await a.topic_partitions(request.topic, request.partition, request.broker)
    now = int(time.time() * 1000)
    found = candidates(await a.describe_producers(tps), now, request.max_transaction_timeout_ms)
    ids: dict[int, str] = {}
    descriptions: dict[str, dict[str, Any] | None] = {}
    if found:
        for row in await a.list_transactions([], sorted({t.producer_id for t in found}), -1):
            ids[int(row["producer_id"])] = row["transactional_id"]
        for txn_id in sorted(set(ids.values())):
            try:
                descriptions[txn_id] = await a.describe(txn_id)
            except TidelogError as exc:
                if exc.code != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                    raise
                descriptions[txn_id] = None
    rows = [{**asdict(t), "duration_ms": now - t.last_timestamp if t.last_timestamp >= 0 else None}
            for t in hanging(found, ids, descriptions)]
    return {"max_transaction_timeout_ms": request.max_transaction_timeout_ms, "hanging": rows}
