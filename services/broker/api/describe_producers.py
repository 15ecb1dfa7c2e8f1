"""DescribeProducers, for both doors (Kafka's API 61, ``kafka-transactions.sh describe-producers`` and
``find-hanging``): per partition this broker leads, the active producers its producer state holds —
epoch, last sequence, the max timestamp of the last batch (read from the log), the coordinator epoch of
the last marker seen for the producer, and the first offset of its open transaction here (-1: none).

A producer known only from its transaction markers (no sequence cached) is listed too, with last
sequence and timestamp -1, as Kafka's producer state keeps such entries. Errors per partition:
``NOT_LEADER_OR_FOLLOWER`` away from the leader, ``UNKNOWN_TOPIC_OR_PARTITION``, and
``TOPIC_AUTHORIZATION_FAILED`` without READ on the topic (Kafka's rule).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from services.broker.api import BrokerApi
from services.broker.partition import Partition
from shared.errors import ErrorCode, TidelogError
from shared.request_context import RequestContext
from shared.security.access import READ, TOPIC
from shared.types import TopicPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProducerStateView:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(slots=True)
class PartitionProducers:
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    producers: list[ProducerStateView] = field(default_factory=list)


def producer_states(part: Partition) -> list[ProducerStateView]:
    """The partition's active producers, by producer id: the idempotent entries joined with each
    producer's transaction state (``TxnState.rows``: epoch, coordinator epoch, open first offset)."""
    txn = {int(r[0]): (int(r[1]), int(r[2]), int(r[3])) for r in part.producers.txn.rows()}
    entries = part.producers.producers
    out = []
    for pid in sorted(set(entries) | set(txn)):
        t_epoch, coordinator_epoch, first = txn.get(pid, (-1, -1, -1))
        entry = entries.get(pid)
        last_seq, last_ts, epoch = -1, -1, t_epoch
        if entry is not None:
            epoch = max(epoch, entry.epoch)
            last_seq = entry.last_seq
            last = entry.batches[-1] if entry.batches else None
            header = part.log.batch_header_at(last.last_offset) if last is not None else None
            last_ts = header.max_timestamp if header is not None else -1
        out.append(ProducerStateView(pid, epoch, last_seq, last_ts, coordinator_epoch, first))
    return out


def describe_producers(b: BrokerApi, tps: list[TopicPartition],
                       ctx: RequestContext | None = None) -> dict[TopicPartition, PartitionProducers]:
    out: dict[TopicPartition, PartitionProducers] = {}
    access = b.pipeline.access
    if access.enabled and ctx is not None:
        tps, denied = access.partition(ctx, READ, TOPIC, tps, lambda tp: tp.topic)
        for tp in denied:
            out[tp] = PartitionProducers(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                         f"{ctx.kafka_principal} may not read {tp.topic}")
    for tp in tps:
        try:
            out[tp] = PartitionProducers(producers=producer_states(b.rm.leader_partition(tp)))
        except TidelogError as exc:
            out[tp] = PartitionProducers(exc.code, exc.args[0] if exc.args else exc.code.name)
        except Exception as exc:  # one partition's failure never ends the request
            log.exception("describe producers failed", extra={"tp": str(tp)})
            out[tp] = PartitionProducers(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
    return out
