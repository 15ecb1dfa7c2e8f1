"""Abort a hanging transaction as ``kafka-transactions.sh abort`` does (Kafka's
``Admin.abortTransaction``): an ABORT marker for the producer, written by the partition's leader
(Broker.WriteTxnMarkers) with the producer id and epoch and a coordinator epoch, so the partition's last
stable offset moves past the transaction and read_committed consumers go on.

The transaction is named either by its ``start_offset`` (the open transaction starting there, looked up
with DescribeProducers) or by ``producer_id``, ``producer_epoch`` and ``coordinator_epoch``. A negative
coordinator epoch (a producer that never saw a marker) becomes 0, as Kafka's tool does. The leader's
answers are the marker's: INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED; INVALID_REQUEST when no
open transaction starts at the offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from services.controller.api import ControllerApi
from services.controller.api.fields import INT32_MAX, INT64_MAX, TOPIC_NAME_SCHEMA
from services.controller.api.transactions_admin import TxnAdmin
from shared.errors import ErrorCode, TidelogError
from shared.request_context import RequestContext
from shared.types import TopicPartition


# The transaction to abort (the request's body on the REST door).
class AbortTransaction(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    topic: StrictStr = Field(..., description="the partition's topic", json_schema_extra=TOPIC_NAME_SCHEMA)
    partition: Annotated[StrictInt, Field(ge=0, le=INT32_MAX)] = Field(..., description="the partition")
    start_offset: Annotated[StrictInt, Field(ge=0, le=INT64_MAX)] | None = Field(
        None, description="the first offset of the open transaction to abort (looked up with DescribeProducers)")
    producer_id: Annotated[StrictInt, Field(ge=0, le=INT64_MAX)] | None = Field(
        None, description="the producer id (without start_offset)")
    producer_epoch: Annotated[StrictInt, Field(ge=0, le=32767)] | None = Field(
        None, description="the producer epoch (with producer_id)")
    coordinator_epoch: Annotated[StrictInt, Field(ge=-1, le=INT32_MAX)] | None = Field(
        None, description="the coordinator epoch (with producer_id; -1 counts as 0)")


@dataclass(frozen=True, slots=True)
class AbortTransactionRequest:
    spec: AbortTransaction


async def abort_transaction(c: ControllerApi, ctx: RequestContext, request: AbortTransactionRequest) -> dict[str, Any]:
    """``{"topic", "partition", "producer_id", "producer_epoch", "coordinator_epoch", "aborted": true}``."""
    spec = request.spec
    a = TxnAdmin(c.store)
    tp = TopicPartition(spec.topic, spec.partition)
    await a.topic_partitions(tp.topic, tp.partition, None)  # UNKNOWN_TOPIC_OR_PARTITION
    if spec.start_offset is not None:
        if spec.producer_id is not None:
            raise TidelogError("give start_offset or producer_id, not both", code=ErrorCode.INVALID_REQUEST)
        producers = (await a.describe_producers([tp]))[tp]
        match = next((s for s in producers if s["current_txn_start_offset"] == spec.start_offset), None)
        if match is None:
            raise TidelogError(f"no open transaction starts at offset {spec.start_offset} on {tp}",
                               code=ErrorCode.INVALID_REQUEST)
        pid, epoch, coordinator_epoch = match["producer_id"], match["producer_epoch"], match["coordinator_epoch"]
    elif spec.producer_id is not None:
        if spec.producer_epoch is None or spec.coordinator_epoch is None:
            raise TidelogError("producer_id needs producer_epoch and coordinator_epoch", code=ErrorCode.INVALID_REQUEST)
        pid, epoch, coordinator_epoch = spec.producer_id, spec.producer_epoch, spec.coordinator_epoch
    else:
        raise TidelogError("name the transaction with start_offset, or with producer_id, producer_epoch and "
                           "coordinator_epoch", code=ErrorCode.INVALID_REQUEST)
    coordinator_epoch = max(0, int(coordinator_epoch))
    await a.write_abort_marker(tp, int(pid), int(epoch), coordinator_epoch)
    return {"topic": tp.topic, "partition": tp.partition, "producer_id": int(pid), "producer_epoch": int(epoch),
            "coordinator_epoch": coordinator_epoch, "aborted": True}
