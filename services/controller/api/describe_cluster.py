"""DescribeCluster: the cluster id, the active controller and the live members (controllers, brokers
with their Kafka listeners, the other services by role), read from etcd. Any controller answers."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from services.controller.api import ControllerApi
from shared.metadata.keys import SERVICE_ROLES, Keys
from shared.request_context import RequestContext


@dataclass(frozen=True, slots=True)
class DescribeCluster:
    pass


class BrokerInfo(BaseModel):
    id: int
    address: str
    rack: str | None = None
    incarnation: str | None = None
    metrics: str | None = None  # host:port of its /metrics
    kafka: str | None = None  # host:port of its Kafka-protocol listener (advertised.listeners)


class InstanceInfo(BaseModel):
    id: str
    address: str
    metrics: str | None = None  # host:port of its /metrics


class ControllerInfo(BaseModel):
    id: int
    epoch: int
    address: str
    rest: str


class ClusterInfo(BaseModel):
    cluster: str
    cluster_id: str | None
    controller: ControllerInfo | None
    controllers: list[InstanceInfo]
    brokers: list[BrokerInfo]
    kafka_bootstrap: str = ""  # every broker's Kafka listener, "host:port,host:port", for Kafka clients
    services: dict[str, list[InstanceInfo]]


async def describe_cluster(c: ControllerApi, ctx: RequestContext, request: DescribeCluster) -> ClusterInfo:
    store = c.store
    keys: Keys = store.keys
    cid = await store.get(keys.cluster_id())
    active = await store.get(keys.controller())
    brokers = await store.get_prefix(keys.brokers_prefix())
    services = await store.get_prefix(keys.services_prefix())
    by_role: dict[str, list[InstanceInfo]] = {role: [] for role in SERVICE_ROLES}
    controllers: list[InstanceInfo] = []
    for key, (value, _, _) in sorted(services.items()):
        role = key.decode()[len(keys.services_prefix().decode()) :].split("/", 1)[0]
        info = InstanceInfo(id=str(Keys.last_segment(key)), address=value.get("address", ""),
                            metrics=value.get("metrics") or None)
        if role == "controller":
            controllers.append(info)
        else:
            by_role.setdefault(role, []).append(info)
    broker_infos = sorted((BrokerInfo(**{k: v.get(k) for k in BrokerInfo.model_fields if k in v})
                           for v, _, _ in brokers.values()), key=lambda b: b.id)
    return ClusterInfo(
        cluster=keys.cluster,
        cluster_id=cid[0] if cid else None,
        controller=ControllerInfo(epoch=active[1], **active[0]) if active else None,
        controllers=controllers,
        brokers=broker_infos,
        kafka_bootstrap=",".join(b.kafka for b in broker_infos if b.kafka),
        services=by_role,
    )
