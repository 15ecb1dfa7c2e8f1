"""Reassignment plans, computed by the controller from the current metadata and returned in Kafka's
reassignment JSON (nothing is applied; the caller executes a plan with AlterPartitionReassignments):

- ``generate``: ``kafka-reassign-partitions.sh --generate`` (``--topics-to-move-json-file``,
  ``--broker-list``): the current and the proposed assignment of the topics over the brokers;
- ``decommission``: every replica moved off one broker (``tidelog brokers decommission``);
- ``replication_factor``: a topic's replica lists grown or shrunk (``tidelog topics alter
  --replication-factor``).

The rules are ``services.controller.reassignment_plans``' (pure). Partitions under reassignment are
planned from their target replicas. Read from etcd: any controller answers.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from services.controller.api import ControllerApi
from services.controller.api.alter_partition_reassignments import BrokerId, TopicName
from services.controller.reassignment_plans import (
    decommission_plan,
    generate_plan,
    plan_json,
    replication_factor_plan,
)
from shared.config import check_min_insync_replicas, validate_topic_configs
from shared.errors import UnknownTopicOrPartitionError
from shared.request_context import RequestContext
from shared.types import TopicPartition


class GenerateReassignment(BaseModel):
    """``--topics-to-move-json-file``'s topics and ``--broker-list``."""

    model_config = ConfigDict(extra="forbid", strict=True)
    topics: list[TopicName] = Field(..., min_length=1, max_length=10_000)
    broker_list: list[BrokerId] = Field(..., min_length=1, max_length=10_000)


class DecommissionPlanRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    broker: BrokerId


class ReplicationFactorPlanRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    topic: TopicName
    replication_factor: Annotated[StrictInt, Field(ge=1, le=64)]


class PlanFile(BaseModel):
    """Kafka's reassignment JSON."""

    version: int
    partitions: list[dict[str, Any]]


class GeneratedPlan(BaseModel):
    current: PlanFile = Field(description="Current partition replica assignment")
    proposed: PlanFile = Field(description="Proposed partition reassignment configuration")


async def _current(c: ControllerApi) -> tuple[dict[TopicPartition, list[int]], dict[int, str | None], Any, Any]:
    """Each partition's replicas (the target of one under reassignment), registered brokers' racks,
    topic records and partition states."""
    pc = c.partition_controller()
    topics, states, _ = await pc.load()
    ongoing = await pc.load_reassignments()
    current = {TopicPartition(t.name, p): list(r) for t in topics.values() for p, r in t.assignment.items()}
    for tp, (rec, _) in ongoing.items():
        if tp in current:
            current[tp] = list(rec.target)
    racks = await c.topic_manager().live_brokers()
    return current, racks, topics, states


def _plan_file(plan: dict[TopicPartition, list[int]]) -> PlanFile:
    return PlanFile(**plan_json(plan))  # type: ignore[arg-type]


async def generate_reassignment(c: ControllerApi, ctx: RequestContext, request: GenerateReassignment) -> GeneratedPlan:
    current, racks, _, _ = await _current(c)
    cur, proposed = generate_plan(current, request.topics, request.broker_list, racks, rng=c.topic_manager().rng)
    return GeneratedPlan(current=_plan_file(cur), proposed=_plan_file(proposed))


async def plan_decommission(c: ControllerApi, ctx: RequestContext, request: DecommissionPlanRequest) -> GeneratedPlan:
    current, racks, _, _ = await _current(c)
    plan = decommission_plan(current, request.broker, {b: r for b, r in racks.items() if b != request.broker})
    return GeneratedPlan(current=_plan_file({tp: current[tp] for tp in plan}), proposed=_plan_file(plan))


async def plan_replication_factor(c: ControllerApi, ctx: RequestContext,
                             request: ReplicationFactorPlanRequest) -> GeneratedPlan:
    current, racks, topics, states = await _current(c)
    topic = topics.get(request.topic)
    if topic is None:
        raise UnknownTopicOrPartitionError(f"topic {request.topic!r} does not exist")
    check_min_insync_replicas(validate_topic_configs(topic.configs), request.replication_factor)
    leaders = {tp: st.leader for tp, (st, _) in states.items() if tp.topic == request.topic}
    plan = replication_factor_plan(current, request.topic, request.replication_factor, racks, leaders)
    return GeneratedPlan(current=_plan_file({tp: current[tp] for tp in plan}), proposed=_plan_file(plan))
