"""WriteTxnMarkers, from the transaction coordinator: end a producer's transaction on each partition this
broker leads by appending a COMMIT or ABORT control batch, fenced by the coordinator's epoch, and answer
once the markers are replicated to the ISR (Kafka writes markers with acks=all).

Kafka's per-partition answers: ``NOT_LEADER_OR_FOLLOWER`` away from the leader,
``TRANSACTION_COORDINATOR_FENCED`` for a deposed coordinator's marker, ``INVALID_PRODUCER_EPOCH`` for an
older producer epoch, ``REQUEST_TIMED_OUT`` when the ISR does not confirm in time. A marker for a partition
where the producer wrote nothing is written all the same (the coordinator may retry): it completes an
empty transaction.

ACLs: markers come only from a coordinator's (or the controller's, aborting a hanging transaction)
service certificate with CLUSTER_ACTION; anyone else gets ``CLUSTER_AUTHORIZATION_FAILED`` on every
partition, nothing written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from services.broker.api import BrokerApi
from services.broker.api.produce import ReplicationWait, wait_for_replication
from services.broker.replica_results import ProduceResult
from shared.errors import ErrorCode, TidelogError
from shared.request_context import RequestContext
from shared.security.access import AuthorizationFailed
from shared.types import TopicPartition

log = logging.getLogger(__name__)
#: how long a marker waits for the ISR (Kafka: the coordinator's request.timeout.ms)
MARKER_TIMEOUT_MS = 30_000


@dataclass(slots=True)
class TxnMarker:
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: list[TopicPartition] = field(default_factory=list)


@dataclass(slots=True)
class MarkerAnswer:
    producer_id: int
    results: dict[TopicPartition, ProduceResult]


#: the service roles that write transaction markers
MARKER_WRITERS = ("coordinator", "controller")


async def write_txn_markers(b: BrokerApi, markers: list[TxnMarker],
                            timeout_ms: int = MARKER_TIMEOUT_MS, ctx: RequestContext | None = None) -> list[MarkerAnswer]:
    answers: list[MarkerAnswer] = []
    access = b.pipeline.access
    if access.enabled and ctx is not None:
        try:
            access.require_service(ctx, MARKER_WRITERS)
        except AuthorizationFailed as exc:
            return [MarkerAnswer(m.producer_id, {tp: ProduceResult(exc.code, exc.message) for tp in m.partitions})
                    for m in markers]
    for m in markers:
        results: dict[TopicPartition, ProduceResult] = {}
        waits: list[ReplicationWait] = []
        for tp in m.partitions:
            try:
                part = b.rm.leader_partition(tp)
                epoch = part.leader_epoch
                offset = part.append_marker(m.producer_id, m.producer_epoch, m.committed, m.coordinator_epoch)
                results[tp] = ProduceResult(base_offset=offset, last_offset=offset)
                waits.append((tp, part, offset + 1, epoch))
            except TidelogError as exc:
                results[tp] = ProduceResult(exc.code, exc.args[0] if exc.args else exc.code.name)
            except Exception as exc:  # one partition's failure never ends the request
                log.exception("transaction marker failed", extra={"tp": str(tp)})
                results[tp] = ProduceResult(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
        answers.append(MarkerAnswer(m.producer_id, await wait_for_replication(timeout_ms, results, waits)))
    return answers
