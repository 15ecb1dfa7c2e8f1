"""DescribeLogDirs (35) and DescribeProducers (61) on the Kafka door: answered from this broker's own
replicas, as Kafka's brokers answer them.

DescribeLogDirs: the broker's one data directory (``log.dirs``) with, per hosted partition, its size on
disk and its offset lag (Kafka's: how far the log end is below the high watermark, 0 on a leader), and
the directory's total and usable bytes (v4). DescribeProducers: per partition led here, the idempotent
producers its producer state holds (epoch, last sequence, the last batch's max timestamp read from the
log); transactions do not exist yet, so coordinator epoch and transaction start offset are -1.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any

from services.broker.kafka.admin_common import item_error
from services.broker.kafka.apis import Connection, KafkaApis, Reply
from services.broker.partition import Partition
from services.broker.pipeline import RequestContext
from shared.errors import ErrorCode
from shared.kafka.messages import RequestFrame
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


def producer_states(part: Partition) -> list[dict[str, Any]]:
    """DescribeProducers' active producers of a partition, from its producer state."""
    out = []
    for pid, entry in sorted(part.producers.producers.items()):
        last = entry.batches[-1] if entry.batches else None
        header = part.log.batch_header_at(last.last_offset) if last is not None else None
        out.append({"producer_id": pid, "producer_epoch": entry.epoch, "last_sequence": entry.last_seq,
                    "last_timestamp": header.max_timestamp if header is not None else -1,
                    "coordinator_epoch": -1, "current_txn_start_offset": -1})
    return out


async def handle_describe_producers(apis: KafkaApis, req: RequestFrame, ctx: RequestContext,
                                    conn: Connection) -> Reply:
    rm = apis.broker.rm
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partition_indexes:
            tp = TopicPartition(t.name, int(p))
            try:
                states = producer_states(rm.leader_partition(tp))
                parts.append({"partition_index": tp.partition, "error_code": 0, "error_message": None,
                              "active_producers": states})
            except Exception as exc:
                err = item_error(exc, f"describe producers of {tp}")
                parts.append({"partition_index": tp.partition, "error_code": int(err.code),
                              "error_message": err.message, "active_producers": []})
        topics.append({"name": t.name, "partitions": parts})
    return {"topics": topics}, 0
