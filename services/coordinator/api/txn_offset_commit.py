"""TxnOffsetCommit (KIP-447): a transaction's offset commits, kept pending until the transaction
coordinator completes the transaction (``complete_txn_offsets.py``); see ``pending_offsets.py``.

Before deciding, KIP-890 part 1: the transaction coordinator is asked whether the producer's ongoing
transaction includes the group's ``__consumer_offsets`` partition (``TxnVerifier``, when the
coordinator has one: ``CoordinatorApi.txn_verifier``), as Kafka's group coordinator verifies before
its transactional append; without it a commit sent before AddOffsetsToTxn would stay pending with
no transaction to complete it. The pending records are answered once committed, and applied then,
in write order (as OffsetCommit's).

When security is on (``authz``), as Kafka's ``handleTxnOffsetCommitRequest``: TRANSACTIONAL_ID WRITE
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), GROUP READ (GROUP_AUTHORIZATION_FAILED), and TOPIC READ per
topic (TOPIC_AUTHORIZATION_FAILED on its partitions; the others go ahead)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from services.coordinator.api import CoordinatorApi
from services.coordinator.api.conversions import error_message, topic_errors
from services.coordinator.authz import Op, Res, allowed, denied_message, split_topics
from services.coordinator.group import GroupError
from services.coordinator.pending_offsets import TxnOffsetCommit
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext
from shared.security.access import access_of
from shared.types import TopicPartition

#: (transactional_id, producer_id, producer_epoch, group_id) -> an error code: NONE when the producer's
#: ongoing transaction includes the group's __consumer_offsets partition (AddPartitionsToTxn with
#: verify_only, KIP-890), else Kafka's answer (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED, INVALID_TXN_STATE...).
TxnVerifier = Callable[[str, int, int, str], Awaitable[int]]


async def txn_offset_commit(c: CoordinatorApi, ctx: RequestContext,
                            request: cpb.TxnOffsetCommitRequest) -> cpb.TxnOffsetCommitResponse:
    commits = [TxnOffsetCommit(TopicPartition(t.name, p.partition), p.committed_offset,
                               p.committed_leader_epoch if p.committed_leader_epoch else -1, p.committed_metadata)
               for t in request.topics for p in t.partitions]
    refused: dict[TopicPartition, int] = {}
    if (access := access_of(c)) is not None:
        txn_id, gid = request.transactional_id, request.group_id
        if not allowed(access, ctx, Op.WRITE, Res.TRANSACTIONAL_ID, txn_id):
            return _refused(request, commits, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                            denied_message(Op.WRITE, Res.TRANSACTIONAL_ID, txn_id))
        if not allowed(access, ctx, Op.READ, Res.GROUP, gid):
            return _refused(request, commits, ErrorCode.GROUP_AUTHORIZATION_FAILED, denied_message(Op.READ, Res.GROUP, gid))
        if denied := split_topics(access, ctx, Op.READ, (cm.tp.topic for cm in commits)):
            refused = {cm.tp: int(ErrorCode.TOPIC_AUTHORIZATION_FAILED) for cm in commits if cm.tp.topic in denied}
            commits = [cm for cm in commits if cm.tp.topic not in denied]
            if not commits:
                return cpb.TxnOffsetCommitResponse(topics=topic_errors(refused))
    rt = c.runtime
    try:
        rt.runtime_for(request.group_id)  # NOT_COORDINATOR & co. before asking the transaction coordinator
        verifier: TxnVerifier | None = getattr(c, "txn_verifier", None)
        if verifier is not None:
            code = await verifier(request.transactional_id, request.producer_id, request.producer_epoch,
                                  request.group_id)
            if code != ErrorCode.NONE:
                return _refused(request, commits, code, "the transaction does not include the group's offsets")
        pr = rt.runtime_for(request.group_id)
        errors, recs = pr.shard.txn_commit_offsets(
            request.group_id, request.transactional_id, request.producer_id, request.producer_epoch,
            request.member_id, request.group_instance_id or None, request.generation_id, commits, rt.now_ms())
        written = rt.submit(pr, recs)
    except GroupError as exc:
        return _refused(request, commits, exc.code, str(exc))

    def apply(f: asyncio.Future[int]) -> None:  # in write order, whether or not anyone awaits
        if not f.cancelled() and f.exception() is None:
            pr.shard.apply_offsets(recs)

    written.add_done_callback(apply)
    try:
        await written
    except GroupError as exc:
        return _refused(request, commits, exc.code, str(exc))
    return cpb.TxnOffsetCommitResponse(topics=topic_errors({**errors, **refused}))


def _refused(request: cpb.TxnOffsetCommitRequest, commits: list[TxnOffsetCommit], code: int,
             message: str) -> cpb.TxnOffsetCommitResponse:
    """A request-level error, also on every partition (Kafka's TxnOffsetCommit has only those)."""
    return cpb.TxnOffsetCommitResponse(error_code=code, error_message=error_message(code, message),
                                       topics=topic_errors({c.tp: code for c in commits}))
