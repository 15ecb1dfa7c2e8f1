"""FindCoordinator answers, shared by brokers and coordinator instances: a key -> its partition of
the internal topic of its coordinator type (a group's ``__consumer_offsets`` partition, a
transactional id's ``__transaction_state`` one) -> the instance owning it (from the ownership keys
in etcd)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shared.errors import ErrorCode
from shared.metadata.store import MetadataStore, dumps
from shared.offsets_topic import OFFSETS_TOPIC, partition_for
from shared.proto import tidelog_pb2 as pb
from shared.txn_topic import COORDINATOR_TYPE_GROUP, COORDINATOR_TYPE_TRANSACTION, TRANSACTION_STATE_TOPIC

#: FindCoordinator key_type -> the internal topic whose partitions its coordinators own
COORDINATOR_TOPICS = {COORDINATOR_TYPE_GROUP: OFFSETS_TOPIC, COORDINATOR_TYPE_TRANSACTION: TRANSACTION_STATE_TOPIC}


def find_coordinators(group_ids: Iterable[str], partitions: int, owners: dict[int, dict[str, Any]],
                      topic: str = OFFSETS_TOPIC) -> pb.FindCoordinatorResponse:
    """``group_ids``: the keys (group ids, or transactional ids with ``topic`` __transaction_state);
    ``partitions``: the topic's partition count (0 while it does not exist); ``owners``: partition ->
    the value of its ownership key. Both topics place a key by Kafka's ``abs(hashCode) % n``."""
    resp = pb.FindCoordinatorResponse()
    for g in group_ids:
        if not partitions:
            resp.coordinators.add(group_id=g, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                  error_message=f"{topic} does not exist yet", partition=-1)
            continue
        p = partition_for(g, partitions)
        owner = owners.get(p)
        if owner is None:
            resp.coordinators.add(group_id=g, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                  error_message=f"no coordinator owns {topic} partition {p} yet", partition=p)
        else:
            resp.coordinators.add(group_id=g, node_id=str(owner.get("owner", "")), address=str(owner.get("address", "")),
                                  partition=p)
    return resp


def unknown_key_type(group_ids: Iterable[str], key_type: int) -> pb.FindCoordinatorResponse:
    """Kafka answers an unknown coordinator type with INVALID_REQUEST."""
    resp = pb.FindCoordinatorResponse()
    for g in group_ids:
        resp.coordinators.add(group_id=g, error_code=ErrorCode.INVALID_REQUEST, partition=-1,
                              error_message=f"unknown coordinator type {key_type}")
    return resp


async def request_internal_topic(store: MetadataStore, topic: str, by: str) -> None:
    """Ask the active controller to create an internal topic made on first use (``__transaction_state``:
    its loop in ``services/controller/internal_topics.py`` watches this key). Idempotent."""
    key = store.keys.internal_topic_request(topic)
    t = store.client.transactions
    await store.client.transaction(compare=[store.cmp_absent(key)],
                                   success=[t.put(key, dumps({"topic": topic, "by": by}))], failure=[])
