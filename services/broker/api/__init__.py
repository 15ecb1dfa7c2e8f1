"""The broker's request layer: one module per API, shared by both front doors.

The gRPC servicer (``services/broker/server.py``) and the Kafka-protocol listener
(``services/broker/kafka/``) only translate their wire messages into the typed
calls of these modules and the typed results back; the rules (appends, reads,
quota accounting, KIP-219 throttling, metrics) live here once, so they hold on
both doors alike. ``BrokerApi`` is what the modules share: the replica manager,
the request pipeline and the broker's links to the rest of the cluster.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from services.broker.pipeline import RequestPipeline
from services.broker.replica_manager import ReplicaManager


@dataclass
class BrokerApi:
    rm: ReplicaManager
    pipeline: RequestPipeline
    broker_id: int
    allocate_producer_id: Callable[[], Awaitable[int]] | None = None
    coordinator_owners: Callable[[], dict[int, dict[str, Any]]] = dict
    #: the owners of the __transaction_state partitions (FindCoordinator for transactional ids)
    txn_coordinator_owners: Callable[[], dict[int, dict[str, Any]]] = dict
    #: asks the controller to create an internal topic made on first use (__transaction_state)
    request_internal_topic: Callable[[str], None] | None = None
    #: services.broker.txn_verify.TxnVerifier when transaction.partition.verification.enable (KIP-890)
    txn_verifier: Any = None
    #: Kafka-listener configs (Kafka's names): auto.create.topics.enable, num.partitions, ...
    configs: dict[str, Any] = field(default_factory=dict)
    #: services.broker.kafka.cluster_links.ClusterLinks once the Kafka listener runs (admin, groups)
    links: Any = None
