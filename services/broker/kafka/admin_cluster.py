"""DescribeCluster (60) and ElectLeaders (43) on the Kafka door.

DescribeCluster answers from this broker's metadata view, as Metadata does (the same brokers, cluster
id and controller id). A broker has no controller endpoints to give: ``endpoint_type`` CONTROLLER (2)
is ``MISMATCHED_ENDPOINT_TYPE``, an unknown type ``UNSUPPORTED_ENDPOINT_TYPE`` (Kafka's KIP-919 answers).

ElectLeaders PREFERRED forwards to the controller's ``/v1/elect-leaders``; each partition's result is
Kafka's: NONE when its leader moved to the preferred replica, ``ELECTION_NOT_NEEDED`` when the preferred
replica leads already, ``PREFERRED_LEADER_NOT_AVAILABLE`` when it is not alive or not in the ISR,
``UNKNOWN_TOPIC_OR_PARTITION``. Asked for every partition (``topic_partitions`` null), partitions
needing no election are left out of the answer, as Kafka does. UNCLEAN elections on request are not
in the controller's REST API: a partition with a live leader is ``ELECTION_NOT_NEEDED`` (Kafka's answer
too), one without is refused with ``INVALID_REQUEST`` (the controller elects out of sync replicas by
itself when the topic's ``unclean.leader.election.enable`` is true).

ACLs, as Kafka: ElectLeaders needs ALTER on the cluster (else ``CLUSTER_AUTHORIZATION_FAILED``, for the
request and each partition named); DescribeCluster needs nothing beyond authentication, and the cluster's
authorized operations asked for are the principal's.
"""

from __future__ import annotations

from typing import Any

from services.broker.kafka.admin_common import ItemError, item_error, links, timeout_s
from services.broker.kafka.apis import Connection, KafkaApis, Reply
from services.broker.kafka.metadata import _CLUSTER_OPERATIONS, _NOT_REQUESTED, _cluster_operations, kafka_brokers
from services.broker.metadata_cache import ClusterView
from services.broker.pipeline import RequestContext
from shared.errors import ErrorCode
from shared.kafka.messages import RequestFrame
from shared.security.access import ALTER, CLUSTER
from shared.security.acl import CLUSTER_NAME
from shared.types import TopicPartition

DESCRIBE_CLUSTER, ELECT_LEADERS = 60, 43
DESCRIBE_CLUSTER_VERSIONS = (0, 1)
ELECT_LEADERS_VERSIONS = (0, 2)
BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT = 1, 2
PREFERRED, UNCLEAN = 0, 1


def register(apis: KafkaApis) -> None:
    apis.register(DESCRIBE_CLUSTER, DESCRIBE_CLUSTER_VERSIONS, handle_describe_cluster)
    apis.register(ELECT_LEADERS, ELECT_LEADERS_VERSIONS, handle_elect_leaders)


async def handle_describe_cluster(apis: KafkaApis, req: RequestFrame, ctx: RequestContext,
                                  conn: Connection) -> Reply:
    body = req.body
    endpoint_type = int(getattr(body, "endpoint_type", BROKERS_ENDPOINT))
    view = apis.broker.rm.view
    out: dict[str, Any] = {"endpoint_type": endpoint_type, "cluster_id": view.cluster_id or "",
                           "controller_id": -1, "brokers": [], "cluster_authorized_operations": _NOT_REQUESTED}
    if endpoint_type == CONTROLLERS_ENDPOINT:
        return {**out, "error_code": int(ErrorCode.MISMATCHED_ENDPOINT_TYPE),
                "error_message": "The request was sent to a broker: it describes brokers only"}, 0
    if endpoint_type != BROKERS_ENDPOINT:
        return {**out, "error_code": int(ErrorCode.UNSUPPORTED_ENDPOINT_TYPE),
                "error_message": f"Unknown endpoint type {endpoint_type}"}, 0
    brokers = kafka_brokers(view)
    return {**out, "error_code": 0, "error_message": None, "controller_id": min(brokers) if brokers else -1,
            "brokers": [{"broker_id": b, "host": h, "port": p, "rack": r} for b, (h, p, r) in brokers.items()],
            "cluster_authorized_operations": (_cluster_operations(apis.pipeline.access, ctx, body)
                                              if apis.pipeline.access.enabled else
                                              _CLUSTER_OPERATIONS if body.include_cluster_authorized_operations
                                              else _NOT_REQUESTED)}, 0


# -- ElectLeaders -----------------------------------------------------------------------------------------


def preferred_result(view: ClusterView, tp: TopicPartition, elected: bool) -> tuple[ErrorCode, str | None]:
    """A partition's PREFERRED election result, from whether the controller moved its leader and its state."""
    if elected:
        return ErrorCode.NONE, None
    replicas = view.replicas(tp)
    st = view.partitions.get(tp)
    if replicas and st is not None and st.leader == replicas[0]:
        return ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."
    return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, (
        f"Failed to elect leader for partition {tp} under strategy PreferredElectionStrategy: the preferred "
        f"replica {replicas[0] if replicas else -1} is not alive or not in the ISR")


def unclean_result(view: ClusterView, tp: TopicPartition) -> tuple[ErrorCode, str | None]:
    st = view.partitions.get(tp)
    if st is not None and st.leader >= 0 and st.leader in view.brokers:
        return ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."
    return ErrorCode.INVALID_REQUEST, (
        f"Unclean leader election on request is not supported by Tidelog for {tp}: set the topic's "
        "unclean.leader.election.enable=true and the controller elects an out-of-sync replica itself")


def _requested(view: ClusterView, body: Any) -> dict[str, list[int]] | None:
    """``{topic: [partitions]}`` asked for (None: every partition); duplicates dropped."""
    if body.topic_partitions is None:
        return None
    out: dict[str, list[int]] = {}
    for t in body.topic_partitions:
        parts = out.setdefault(t.topic, [])
        parts += [int(p) for p in t.partitions if int(p) not in parts]
    return out


async def handle_elect_leaders(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    body = req.body
    election_type = int(getattr(body, "election_type", PREFERRED))
    view = apis.broker.rm.view
    asked = _requested(view, body)
    access = apis.pipeline.access
    if access.enabled and not access.allowed(ctx, ALTER, CLUSTER, CLUSTER_NAME):
        exc = access.denied(ctx, ALTER, CLUSTER, CLUSTER_NAME)
        denied: dict[str, Any] = {"replica_election_results": [
            {"topic": t, "partition_result": [{"partition_id": p, "error_code": int(exc.code),
                                               "error_message": exc.message} for p in ps]}
            for t, ps in (asked or {}).items()]}
        if req.api.version >= 1:
            denied["error_code"] = int(exc.code)
        return denied, 0
    every = asked is None
    if asked is None:
        asked = {}
        for tp in sorted(view.partitions):
            asked.setdefault(tp.topic, []).append(tp.partition)
    results: dict[str, list[dict[str, Any]]] = {}

    def put(tp: TopicPartition, code: ErrorCode, message: str | None) -> None:
        if every and code == ErrorCode.ELECTION_NOT_NEEDED:
            return
        results.setdefault(tp.topic, []).append({"partition_id": tp.partition, "error_code": int(code),
                                                 "error_message": message})

    todo: dict[str, list[TopicPartition]] = {}
    for topic, partitions in asked.items():
        known = view.topics.get(topic)
        for tp in (TopicPartition(topic, p) for p in partitions):
            if known is None or tp.partition not in known.assignment:
                put(tp, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp} does not exist")
            elif election_type == UNCLEAN:
                put(tp, *unclean_result(view, tp))
            elif election_type != PREFERRED:
                put(tp, ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}")
            else:
                todo.setdefault(topic, []).append(tp)
    # One call for every partition, else one per topic.
    calls = [(None, [tp for tps in todo.values() for tp in tps])] if every else list(todo.items())
    elected: set[TopicPartition] = set()
    for topic, tps in calls:
        if not tps:
            continue
        try:
            result = await links(apis).elect_preferred(topic, None if topic is None else [tp.partition for tp in tps])
            if not result.ok:
                raise ItemError(result.error, result.message or result.error.name)
            moved = {TopicPartition(e["topic"], int(e["partition"])) for e in (result.body or {}).get("elected", [])}
            elected |= moved
            for tp in tps:
                put(tp, *preferred_result(view, tp, tp in moved))
        except Exception as exc:
            err = item_error(exc, f"elect leaders of {topic or 'every topic'!r}")
            for tp in tps:
                put(tp, err.code, err.message)
    if elected and apis.broker.links is not None:
        await apis.broker.links.wait_for_view(lambda: _leaders_moved(apis, elected), timeout_s(body.timeout))
    out: dict[str, Any] = {"replica_election_results": [{"topic": t, "partition_result": r}
                                                         for t, r in results.items()]}
    if req.api.version >= 1:
        out["error_code"] = 0
    return out, 0


def _leaders_moved(apis: KafkaApis, elected: set[TopicPartition]) -> bool:
    view = apis.broker.rm.view
    for tp in elected:
        st = view.partitions.get(tp)
        replicas = view.replicas(tp)
        if st is None or not replicas or st.leader != replicas[0]:
            return False
    return True
