"""DescribeLogDirs (Kafka's API 35, ``kafka-log-dirs.sh --describe``): this broker's one log directory —
its path, the file system's total and usable bytes — and, per partition replica held here (leader or
follower), the bytes of its segment files and its offset lag (Kafka's rule for a current log:
``max(0, high watermark - log end offset)``). There are no future logs (intra-broker moves), so
``is_future`` is always false. ACLs: CLUSTER DESCRIBE (``authorize``; Kafka answers
``CLUSTER_AUTHORIZATION_FAILED`` with no log dirs)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field

from services.broker.api import BrokerApi
from shared.request_context import RequestContext
from shared.security.access import CLUSTER, DESCRIBE
from shared.security.acl import CLUSTER_NAME
from shared.types import TopicPartition


@dataclass(frozen=True, slots=True)
class ReplicaLog:
    tp: TopicPartition
    size: int
    offset_lag: int
    is_future: bool = False


@dataclass(slots=True)
class LogDirDescription:
    path: str
    total_bytes: int = -1
    usable_bytes: int = -1
    replicas: list[ReplicaLog] = field(default_factory=list)


def authorize(api: BrokerApi, ctx: RequestContext) -> None:
    """Raise ``AuthorizationFailed`` (CLUSTER_AUTHORIZATION_FAILED) without CLUSTER DESCRIBE."""
    access = api.pipeline.access
    if access.enabled:
        access.require(ctx, DESCRIBE, CLUSTER, CLUSTER_NAME)


def describe_log_dirs(api: BrokerApi, only: Iterable[tuple[str, list[int]]] | None = None) -> LogDirDescription:
    """The log directory and the replicas held in it: all of them, or those of ``only`` ((topic,
    partitions) pairs; no partitions: every partition of the topic)."""
    rm = api.rm
    wanted = {t: set(ps) for t, ps in only} if only else None
    out = LogDirDescription(os.path.abspath(rm.data_dir))
    try:
        usage = shutil.disk_usage(rm.data_dir)
        out.total_bytes, out.usable_bytes = usage.total, usage.free
    except OSError:
        pass
    for tp, part in sorted(rm.partitions.items()):
        if wanted is not None and (tp.topic not in wanted or (wanted[tp.topic] and tp.partition not in wanted[tp.topic])):
            continue
        try:
            size = part.log.size
            lag = max(0, part.high_watermark - part.log_end_offset)
        except (AttributeError, OSError, ValueError):  # closed while we looked (deleted, moved away)
            continue
        out.replicas.append(ReplicaLog(tp, size, lag))
    return out
