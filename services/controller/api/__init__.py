"""The controller's request layer: one module per admin API, shared by its front doors.

The REST routers (``services/controller/rest/``) and the gRPC servicer
(``services/controller/grpc_api.py``) only translate their wire forms into the
typed calls of these modules and the typed results back. Every API is
``async def <api>(c: ControllerApi, ctx: RequestContext, request) -> response``:
the request context (who asks, already let in by the service's authorization
hook) reaches the one place where a per-resource rule (an ACL on a topic, on the
cluster) can hold for every door. Validation and errors are the APIs' own
(Kafka's error names); each door maps them to its status codes.

Modules: ``create_topic``, ``delete_topic``, ``describe_topics`` (list and
describe: two reads of the same records), ``alter_configs``,
``create_partitions``, ``elect_leaders``, ``describe_client_quotas`` (describe
and effective quotas: two reads of the same entries), ``alter_client_quotas``,
``describe_groups`` (list and describe), ``delete_group``, ``reset_offsets``,
``describe_cluster``, ``cleaner_status``; the brokers' ``alter_partition`` and
``controlled_shutdown``. Must not import the doors (``rest``, ``grpc_api``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from services.controller.election import ControllerElection
from services.controller.groups_admin import GroupAdmin
from services.controller.quota_configs import QuotaConfigs
from services.controller.replication import PartitionController
from services.controller.topics import TopicManager
from shared.errors import NotActiveError
from shared.metadata.store import MetadataStore

if TYPE_CHECKING:
    from services.controller.balancer_loop import BalancerLoop


@dataclass
class ControllerApi:
    """What the API modules share: the metadata store and the controller's managers. The election and
    the managers that need it exist once the controller has started (``Controller.start``)."""

    store: MetadataStore
    election: ControllerElection | None = None
    topics: TopicManager | None = None
    partitions: PartitionController | None = None
    balancer: BalancerLoop | None = None
    quotas: QuotaConfigs = field(init=False)
    groups: GroupAdmin = field(init=False)
    #: the process's shared.security.service_security.ServiceSecurity, set by the controller at start (None
    #: or disabled: everything is allowed), and the Access built over it (``services.controller.authz``)
    security: Any = None
    _access: Any = field(default=None, init=False, repr=False)
    _access_override: Any = field(default=None, init=False, repr=False)

    @property
    def access(self) -> Any:
        """The ``Access`` API modules check with (None while security is off): ``authz.access_of``, unless
        one was set (tests)."""
        if self._access_override is not None:
            return self._access_override
        from shared.security.access import access_of

        return access_of(self)

    @access.setter
    def access(self, value: Any) -> None:
        self._access_override = value

    def __post_init__(self) -> None:
        self.quotas = QuotaConfigs(self.store)
        self.groups = GroupAdmin(self.store)

    @property
    def active(self) -> bool:
        """This controller is the active one (its writes are the cluster's)."""
        return self.election is not None and self.election.active

    def topic_manager(self) -> TopicManager:
        if self.topics is None:
            raise NotActiveError("this controller is still starting; retry shortly")
        return self.topics

    def partition_controller(self) -> PartitionController:
        if self.partitions is None:
            raise NotActiveError("this controller is still starting; retry shortly")
        return self.partitions

    def active_partitions(self) -> PartitionController | None:
        """The partition controller while this controller is the active one, else None (NOT_CONTROLLER)."""
        return self.partitions if self.active else None
