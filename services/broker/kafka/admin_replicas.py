"""DescribeLogDirs (35) and DescribeProducers (61) on the Kafka door: answered from this broker's own
replicas, as Kafka's brokers answer them.

DescribeLogDirs: the broker's one data directory (``log.dirs``) with, per hosted partition, its size on
disk and its offset lag (Kafka's: how far the log end is below the high watermark, 0 on a leader), and
the directory's total and usable bytes (v4). DescribeProducers: per partition led here, the
producers its producer state holds (epoch, last sequence, the last batch's max timestamp read from the
log, the coordinator epoch of its last marker and its open transaction's first offset), from the request
layer's ``services/broker/api/describe_producers`` that the gRPC door shares. ACLs, as Kafka:
DescribeLogDirs needs DESCRIBE on the cluster (``CLUSTER_AUTHORIZATION_FAILED``, no directories);
DescribeProducers READ on each topic (the request layer's rule).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any

from services.broker.api import describe_producers as describe_producers_api
from services.broker.kafka.admin_common import item_error
from services.broker.kafka.apis import Connection, KafkaApis, Reply
from services.broker.partition import Partition
from services.broker.pipeline import RequestContext
from shared.errors import ErrorCode
from shared.kafka.messages import RequestFrame
from shared.security.access import CLUSTER, DESCRIBE
from shared.types import TopicPartition

DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS = 35, 61
DESCRIBE_LOG_DIRS_VERSIONS = (1, 4)
DESCRIBE_PRODUCERS_VERSIONS = (0, 0)


def register(apis: KafkaApis) -> None:
    apis.register(DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSIONS, handle_describe_log_dirs)
    apis.register(DESCRIBE_PRODUCERS, DESCRIBE_PRODUCERS_VERSIONS, handle_describe_producers)


def log_dir_partitions(partitions: dict[TopicPartition, Partition],
                       asked: dict[str, list[int]] | None) -> list[dict[str, Any]]:
    """DescribeLogDirs' topics of one directory: the hosted partitions asked for (``asked`` None: all)."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, part in sorted(partitions.items()):
        if asked is not None and tp.partition not in asked.get(tp.topic, ()):
            continue
        by_topic.setdefault(tp.topic, []).append({
            "partition_index": tp.partition, "partition_size": part.log.size,
            "offset_lag": max(part.high_watermark - part.log_end_offset, 0), "is_future_key": False})
    return [{"name": t, "partitions": ps} for t, ps in by_topic.items()]


async def handle_describe_log_dirs(apis: KafkaApis, req: RequestFrame, ctx: RequestContext,
                                   conn: Connection) -> Reply:
    body = req.body
    rm = apis.broker.rm
    asked = None if body.topics is None else {t.topic: [int(p) for p in t.partitions] for t in body.topics}
    log_dir = os.path.abspath(rm.data_dir)
    access = apis.pipeline.access
    if access.enabled and not access.check(ctx, DESCRIBE, CLUSTER):  # Kafka: no log dirs, the error (v3+)
        return {"error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "results": []}, 0
    try:
        usage = await asyncio.to_thread(shutil.disk_usage, log_dir)
        result = {"error_code": 0, "log_dir": log_dir, "topics": log_dir_partitions(rm.partitions, asked),
                  "total_bytes": usage.total, "usable_bytes": usage.free}
    except OSError:  # the directory is gone or unreadable: Kafka's offline log dir
        result = {"error_code": int(ErrorCode.KAFKA_STORAGE_ERROR), "log_dir": log_dir, "topics": [],
                  "total_bytes": -1, "usable_bytes": -1}
    except Exception as exc:
        err = item_error(exc, "describe log dirs")
        result = {"error_code": int(err.code), "log_dir": log_dir, "topics": [], "total_bytes": -1,
                  "usable_bytes": -1}
    return {"error_code": 0, "results": [result]}, 0


async def handle_describe_producers(apis: KafkaApis, req: RequestFrame, ctx: RequestContext,
                                    conn: Connection) -> Reply:
    tps = [TopicPartition(t.name, int(p)) for t in req.body.topics for p in t.partition_indexes]
    answers = describe_producers_api.describe_producers(apis.broker, tps, ctx)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp in tps:
        r = answers[tp]
        by_topic.setdefault(tp.topic, []).append({
            "partition_index": tp.partition, "error_code": int(r.error), "error_message": r.message or None,
            "active_producers": [{"producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
                                  "last_sequence": s.last_sequence, "last_timestamp": s.last_timestamp,
                                  "coordinator_epoch": s.coordinator_epoch,
                                  "current_txn_start_offset": s.current_txn_start_offset}
                                 for s in r.producers]})
    return {"topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}, 0
