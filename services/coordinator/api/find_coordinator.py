"""FindCoordinator: which coordinator instance owns each group's ``__consumer_offsets`` partition."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from shared.coordinator_lookup import find_coordinators
from shared.proto import tidelog_pb2 as pb
from shared.request_context import RequestContext


async def find_coordinator(c: CoordinatorApi, ctx: RequestContext,
                           request: pb.FindCoordinatorRequest) -> pb.FindCoordinatorResponse:
    view = c.runtime.view
    return find_coordinators(request.group_ids, view.offsets_partitions, view.owners)
