"""``commitOffsetsToGroup``: after each finished micro-batch the streaming source commits the
batch's end offsets to a consumer group, so lag tools (``tidelog groups describe``) see the
query's progress. Spark's checkpoint stays the source of truth: the commit is best effort
(logged, never failing the query), made outside the group protocol (member epoch -1),
which the coordinator accepts while the group has no live members."""

from __future__ import annotations

import logging

from pipelines.tidelog_source.security import SecurityOptions
from shared.client.cluster import ClusterClient
from shared.client.group_coordinator import GroupCoordinatorClient
from shared.errors import TidelogError
from shared.proto import coordinator_pb2 as cpb
from shared.types import TopicPartition

log = logging.getLogger(__name__)


class GroupOffsetCommitter:
    def __init__(self, bootstrap_servers: str, group_id: str, security: SecurityOptions | None = None) -> None:
        self.group_id = group_id
        self.cluster = ClusterClient(bootstrap_servers, "tidelog-spark-commit",
                                     security=security.client_security() if security else None)
        self.coordinator = GroupCoordinatorClient(self.cluster, group_id, timeout_s=5)  # best effort: never hold a batch long

    def commit(self, offsets: dict[TopicPartition, int]) -> bool:
        by: dict[str, list[cpb.OffsetCommitPartition]] = {}
        for tp, off in sorted(offsets.items()):
            by.setdefault(tp.topic, []).append(cpb.OffsetCommitPartition(partition=tp.partition, committed_offset=off,
                                                                         committed_leader_epoch=-1))
        req = cpb.OffsetCommitRequest(group_id=self.group_id, member_epoch=-1,
                                      topics=[cpb.OffsetCommitTopic(name=t, partitions=ps) for t, ps in by.items()])
        try:
            resp = self.coordinator.call("OffsetCommit", req)
        except TidelogError as exc:
            log.warning("commit to group %s failed: %s", self.group_id, exc)
            return False
        codes = [p.error_code for t in resp.topics for p in t.partitions]
        if resp.error_code or any(codes):
            log.warning("commit to group %s refused: %s %s", self.group_id, resp.error_code or max(codes), resp.error_message)
            return False
        return True

    def close(self) -> None:
        self.coordinator.close()
        self.cluster.close()
