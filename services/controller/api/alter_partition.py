"""AlterPartition, from partition leaders: ISR changes proposed against the partition's epochs, checked
and written by the active controller. Kafka's form carries many partitions, each answered on its own
(``batched``); the older one-partition form is answered for the whole request. NOT_CONTROLLER and
STALE_BROKER_EPOCH refuse the whole request. When security is on, only broker ``broker_id``'s own service
certificate with CLUSTER_ACTION may send it (``authz.broker_refusal``: CLUSTER_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.controller.api import ControllerApi
from services.controller.authz import broker_refusal
from services.controller.partitions import MAX_ALTER_PARTITION_ITEMS, AlterItem
from shared.errors import ErrorCode, TidelogError
from shared.metadata.types import PartitionState
from shared.request_context import RequestContext
from shared.security.access import access_of


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    broker_id: int
    incarnation: str  # the sender's broker epoch: must match its live registration
    items: list[AlterItem]  # (partition, leader epoch, partition epoch, new ISR)
    batched: bool = True  # False: the one-partition form (exactly one item, answered in ``state``)


@dataclass(slots=True)
class AlterPartitionResponse:
    error: ErrorCode = ErrorCode.NONE  # for the whole request
    message: str = ""
    state: PartitionState | None = None  # the one-partition form's new state
    results: list[PartitionState | TidelogError] = field(default_factory=list)  # per item, in order (batched)


async def alter_partition(c: ControllerApi, ctx: RequestContext, request: AlterPartitionRequest) -> AlterPartitionResponse:
    if (why := broker_refusal(access_of(c), ctx, request.broker_id)) is not None:
        return AlterPartitionResponse(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, why)
    pc = c.active_partitions()
    if pc is None:
        return AlterPartitionResponse(ErrorCode.NOT_CONTROLLER, "not the active controller")
    if not request.batched:
        tp, leader_epoch, partition_epoch, new_isr = request.items[0]
        try:
            st = await pc.alter_partition(request.broker_id, request.incarnation, tp, leader_epoch, partition_epoch,
                                          new_isr)
        except TidelogError as exc:
            return AlterPartitionResponse(exc.code, str(exc))
        return AlterPartitionResponse(state=st)
    if len(request.items) > MAX_ALTER_PARTITION_ITEMS:
        return AlterPartitionResponse(ErrorCode.INVALID_REQUEST, (
            f"{len(request.items)} partitions in one AlterPartition request; at most {MAX_ALTER_PARTITION_ITEMS}"))
    try:
        results = await pc.alter_partitions(request.broker_id, request.incarnation, request.items)
    except TidelogError as exc:  # the whole request: stale broker epoch, no longer the controller
        return AlterPartitionResponse(exc.code, str(exc))
    return AlterPartitionResponse(results=results)
