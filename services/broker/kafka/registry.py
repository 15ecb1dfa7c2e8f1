"""Which Kafka APIs the broker's Kafka listener serves, at which versions, by which module.

ApiVersions answers exactly this table: every version claimed is answered by its module (the response
shaped for that version by ``shared.kafka.messages.build``), and nothing is claimed that is not.
"""

from __future__ import annotations

from services.broker.api import BrokerApi
from services.broker.kafka import (
    admin_cluster,
    admin_configs,
    admin_quotas,
    admin_records,
    admin_replicas,
    admin_topics,
    fetch,
    groups,
    groups_consumer,
    metadata,
    produce,
    transactions,
)
from services.broker.kafka.apis import KafkaApis, handle_api_versions
from services.broker.kafka.group_routing import CoordinatorRouter
from shared.kafka.messages import api

API_VERSIONS = 18
API_VERSIONS_VERSIONS = (0, 4)


def kafka_apis(broker: BrokerApi) -> KafkaApis:
    apis = KafkaApis(broker, broker.pipeline)
    apis.fetch_sessions = fetch.FetchSessions()
    apis.groups = CoordinatorRouter(broker)
    register_all(apis)
    return apis


def load_schemas() -> int:
    """Load the classes of every version served now (they load on first use otherwise): what the fork
    server does once before forking brokers (``fork_server_warm``), so that no forked broker repeats
    the 1.5-2.5 s of CPU. Returns how many versions."""
    apis = KafkaApis(None, None)  # type: ignore[arg-type]  # only the table is built
    register_all(apis)
    n = 0
    for key, (lo, hi) in apis.versions.items():
        for v in range(lo, hi + 1):
            api(key, v)
            n += 1
    return n


def register_all(apis: KafkaApis) -> None:
    apis.register(API_VERSIONS, API_VERSIONS_VERSIONS, handle_api_versions)
    apis.register(produce.API_KEY, produce.VERSIONS, produce.handle)
    apis.register(fetch.API_KEY, fetch.VERSIONS, fetch.handle)
    apis.register(metadata.METADATA, metadata.METADATA_VERSIONS, metadata.handle_metadata)
    apis.register(metadata.LIST_OFFSETS, metadata.LIST_OFFSETS_VERSIONS, metadata.handle_list_offsets)
    apis.register(metadata.FIND_COORDINATOR, metadata.FIND_COORDINATOR_VERSIONS, metadata.handle_find_coordinator)
    admin_topics.register(apis)
    admin_configs.register(apis)
    admin_cluster.register(apis)
    admin_quotas.register(apis)
    admin_replicas.register(apis)
    admin_records.register(apis)
    groups.register(apis)
    groups_consumer.register(apis)
    transactions.register(apis)
