"""FindCoordinator: which coordinator instance owns each key's partition: a group's
``__consumer_offsets`` partition (key_type 0), a transactional id's ``__transaction_state`` one
(key_type 1). Asking for a transactional id while ``__transaction_state`` does not exist asks the
controller to create it, as Kafka creates the topic on the first such FindCoordinator."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from shared.coordinator_lookup import COORDINATOR_TOPICS, find_coordinators, unknown_key_type
from shared.proto import tidelog_pb2 as pb
from shared.request_context import RequestContext


async def find_coordinator(c: CoordinatorApi, ctx: RequestContext,
                           request: pb.FindCoordinatorRequest) -> pb.FindCoordinatorResponse:
    topic = COORDINATOR_TOPICS.get(request.key_type)
    if topic is None:
        return unknown_key_type(request.group_ids, request.key_type)
    rt, view = c.runtime, c.runtime.view
    partitions = view.partitions_of(topic)
    if not partitions:
        for kind in rt.kinds.values():
            if kind.topic == topic:
                rt.request_topic(kind)
    return find_coordinators(request.group_ids, partitions, view.owners_of(topic), topic)
