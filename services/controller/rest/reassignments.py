"""``/v1/reassignments``: partition reassignment (Kafka's KIP-455 and kafka-reassign-partitions.sh),
translated onto ``services.controller.api``'s ``alter_partition_reassignments``,
``list_partition_reassignments`` and ``reassignment_plans``. Writes are forwarded to the active
controller like topic writes; lists and plans are read from etcd by any controller.

    GET    /v1/reassignments                              reassignments in progress (?topic= one topic)
    POST   /v1/reassignments                              execute Kafka's reassignment JSON (null replicas cancel)
    DELETE /v1/reassignments                              cancel: {"partitions": [{topic, partition}]}
    POST   /v1/reassignments/generate                     --generate: current and proposed assignment
    POST   /v1/reassignments/decommission-plan            every replica off one broker
    POST   /v1/reassignments/replication-factor-plan      a topic's replication factor changed
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from services.controller.api import alter_partition_reassignments as alter_api
from services.controller.api import list_partition_reassignments as list_api
from services.controller.api import reassignment_plans as plans_api
from services.controller.api.alter_partition_reassignments import (
    AlterReassignmentsResult,
    CancelReassignments,
    ReassignmentPlan,
)
from services.controller.api.fields import TOPIC_NAME_MAX, TOPIC_NAME_PATTERN
from services.controller.api.list_partition_reassignments import ListPartitionReassignments, ReassignmentList
from services.controller.api.reassignment_plans import (
    DecommissionPlanRequest,
    GeneratedPlan,
    GenerateReassignment,
    ReplicationFactorPlanRequest,
)
from services.controller.rest.deps import Api, Ctx
from services.controller.rest.errors import error_responses
from services.controller.rest.topics import _forward

OneTopic = Annotated[str | None, Query(min_length=1, max_length=TOPIC_NAME_MAX, pattern=TOPIC_NAME_PATTERN,
                                       description="only this topic")]
router = APIRouter(prefix="/v1/reassignments", tags=["reassignments"])
_E400 = ("Invalid plan (INVALID_REQUEST, INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS, "
         "INVALID_REPLICATION_FACTOR)")


@router.get("", response_model=ReassignmentList, summary="Partition reassignments in progress",
            responses=error_responses(400, 503))
async def list_reassignments(c: Api, ctx: Ctx, topic: OneTopic = None) -> Any:
    request = ListPartitionReassignments(topics=[topic] if topic is not None else None)
    return await list_api.list_partition_reassignments(c, ctx, request)


@router.post("", response_model=AlterReassignmentsResult,
             summary="Start (or replace) reassignments from Kafka's reassignment JSON; null replicas cancel",
             responses=error_responses(404, 503, e400=_E400))
async def alter_reassignments(body: ReassignmentPlan, request: Request, c: Api, ctx: Ctx) -> Any:
    if (fwd := await _forward(c, request)) is not None:
        return fwd
    return await alter_api.alter_partition_reassignments(c, ctx, body)


@router.delete("", response_model=AlterReassignmentsResult,
               summary="Cancel reassignments: the partitions return to their original replicas",
               responses=error_responses(404, 503, e400=_E400))
async def cancel_reassignments(body: CancelReassignments, request: Request, c: Api, ctx: Ctx) -> Any:
    if (fwd := await _forward(c, request)) is not None:
        return fwd
    return await alter_api.cancel_partition_reassignments(c, ctx, body)


@router.post("/generate", response_model=GeneratedPlan,
             summary="kafka-reassign-partitions --generate: the topics' current and proposed assignment",
             responses=error_responses(404, 503, e400=_E400))
async def generate(body: GenerateReassignment, c: Api, ctx: Ctx) -> Any:
    return await plans_api.generate_reassignment(c, ctx, body)


@router.post("/decommission-plan", response_model=GeneratedPlan,
             summary="A plan moving every replica off a broker (not applied)",
             responses=error_responses(503, e400=_E400))
async def decommission_plan(body: DecommissionPlanRequest, c: Api, ctx: Ctx) -> Any:
    return await plans_api.plan_decommission(c, ctx, body)


@router.post("/replication-factor-plan", response_model=GeneratedPlan,
             summary="A plan changing a topic's replication factor (not applied)",
             responses=error_responses(404, 503, e400=_E400))
async def replication_factor_plan(body: ReplicationFactorPlanRequest, c: Api, ctx: Ctx) -> Any:
    return await plans_api.plan_replication_factor(c, ctx, body)
