"""The group coordinator's request layer: one module per API.

Each module is ``async def <api>(c, ctx, request) -> response``: the protobuf request of the
GroupCoordinator service in, its protobuf response out, with the request context the call entered
with (``shared.request_context``: principal, client id, peer), where per-group ACLs will be checked.
The protobuf messages are the typed requests here because the coordinator has one door: the
broker's Kafka listener reaches it through the same gRPC service, so a second set of types would
only copy the schema. The gRPC servicer (``services/coordinator/servicer.py``) only hands calls to
these modules. ``CoordinatorApi`` is what they share: the partitions runtime, the classic group
service and the metrics, and the process's security (``authz.access_of``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.coordinator.classic_service import ClassicGroupService
from services.coordinator.runtime import CoordinatorRuntime


@dataclass
class CoordinatorApi:
    runtime: CoordinatorRuntime
    classic: ClassicGroupService
    #: services.coordinator.metrics.CoordinatorMetrics when the process exposes /metrics
    metrics: Any = None
    #: the process's shared.security.service_security.ServiceSecurity (set by the service at start; None
    #: or disabled: everything is allowed), and the Access built over it (``services.coordinator.authz``)
    security: Any = None
    _access: Any = field(default=None, repr=False)
