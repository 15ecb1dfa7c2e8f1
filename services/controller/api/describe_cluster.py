"""DescribeCluster: the cluster id, the active controller and the live members (controllers, brokers
with their Kafka listeners, the other services by role), read from etcd. Any controller answers.

When security is on, a principal without CLUSTER DESCRIBE sees no broker incarnations (a broker epoch is
what fences internal requests; no client needs it) and every member's client-facing address
(``transport.client_facing``: the TLS port for SCRAM users, not the mTLS one between services).
Plaintext output is unchanged (no authorizer: everyone may describe the cluster, as Kafka)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from services.controller.api import ControllerApi
from services.controller.authz import Op, Res
from shared.metadata.keys import SERVICE_ROLES, Keys
from shared.request_context import RequestContext
from shared.security.access import access_of
from shared.security.acl import CLUSTER_NAME


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


def _address(reg: dict[str, object], access: object) -> str:
    """A member's address as clients should use it: its client port when security is on and it has one."""
    if access is not None and reg.get("client_address"):
        return str(reg["client_address"])
    return str(reg.get("address", ""))


async def describe_cluster(c: ControllerApi, ctx: RequestContext, request: DescribeCluster) -> ClusterInfo:
    store = c.store
    keys: Keys = store.keys
    cid = await store.get(keys.cluster_id())
    active = await store.get(keys.controller())
    brokers = await store.get_prefix(keys.brokers_prefix())
    services = await store.get_prefix(keys.services_prefix())
    access = access_of(c)
    internal = access is None or access.allowed(ctx, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME)
    by_role: dict[str, list[InstanceInfo]] = {role: [] for role in SERVICE_ROLES}
    controllers: list[InstanceInfo] = []
    for key, (value, _, _) in sorted(services.items()):
        role = key.decode()[len(keys.services_prefix().decode()) :].split("/", 1)[0]
        info = InstanceInfo(id=str(Keys.last_segment(key)), address=_address(value, access),
                            metrics=value.get("metrics") or None)
        if role == "controller":
            controllers.append(info)
        else:
            by_role.setdefault(role, []).append(info)
    broker_infos = sorted((BrokerInfo(**{k: v.get(k) for k in BrokerInfo.model_fields if k in v})
                           for v, _, _ in brokers.values()), key=lambda b: b.id)
    if access is not None:
        by_id = {v.get("id"): v for v, _, _ in brokers.values()}
        for b in broker_infos:
            b.address = _address(by_id.get(b.id, {}), access) or b.address
            if not internal:
                b.incarnation = None
    return ClusterInfo(
        cluster=keys.cluster,
        cluster_id=cid[0] if cid else None,
        controller=ControllerInfo(epoch=active[1], **active[0]) if active else None,
        controllers=controllers,
        brokers=broker_infos,
        kafka_bootstrap=",".join(b.kafka for b in broker_infos if b.kafka),
        services=by_role,
    )
