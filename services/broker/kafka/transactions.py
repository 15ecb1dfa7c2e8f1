"""Kafka's transaction APIs on the Kafka door, forwarded to the transaction coordinator owning the
transactional id (``group_routing.TxnRouter``): InitProducerId (22) with a transactional id,
AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26), DescribeTransactions (65) and
ListTransactions (66); TxnOffsetCommit (28) goes to the group's coordinator (``GroupCoordinator``).

Versions served are those of transactions V1 (the client adds partitions with AddPartitionsToTxn, the
leader verifies before the append, KIP-890 part 1): AddPartitionsToTxn v4+ is broker-to-coordinator
and EndTxn v5 / TxnOffsetCommit v5 / Produce v12 are transactions V2's, which this door does not claim.

Errors are translated for the versions that predate them, as Kafka's ``KafkaApis`` does:
``PRODUCER_FENCED`` (KIP-588) is ``INVALID_PRODUCER_EPOCH`` before InitProducerId v4, AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn v2; ``TRANSACTION_ABORTABLE`` (KIP-890) is ``INVALID_TXN_STATE`` before
InitProducerId v5, AddOffsetsToTxn, EndTxn and TxnOffsetCommit v4 (and on every client
AddPartitionsToTxn version). A coordinator that cannot be reached answers ``NOT_COORDINATOR`` (the
client looks it up again); none owning the id yet ``COORDINATOR_NOT_AVAILABLE``.

ACLs are checked here before anything is forwarded, as Kafka's ``KafkaApis``: WRITE on the transactional
id for InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit
(``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``; an idempotent InitProducerId needs IDEMPOTENT_WRITE on the
cluster or WRITE on some topic); WRITE on each topic added (``TOPIC_AUTHORIZATION_FAILED``, the others
``OPERATION_NOT_ATTEMPTED``); READ on the group for AddOffsetsToTxn and TxnOffsetCommit
(``GROUP_AUTHORIZATION_FAILED``) and on each committed topic; DESCRIBE on the transactional id for
DescribeTransactions, and ListTransactions lists only those.
"""

from __future__ import annotations

import datetime
from typing import Any

from services.broker.api import init_producer_id as init_producer_id_api
from services.broker.kafka.apis import Connection, KafkaApis, Reply
from services.broker.kafka.group_routing import CoordinatorRouter, NoCoordinator, TxnRouter
from services.broker.kafka.metadata import coordinator_node
from services.broker.pipeline import RequestContext
from shared.errors import ErrorCode
from shared.kafka.messages import RequestFrame
from shared.proto import coordinator_pb2 as cpb
from shared.proto import transactions_pb2 as tpb
from shared.security.access import DESCRIBE, GROUP, READ, TOPIC, TRANSACTIONAL_ID, WRITE
from shared.txn_topic import TRANSACTION_STATE_TOPIC

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 22, 24, 25, 26, 28
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
# v6 is KIP-939's two-phase commit (enable2Pc, keepPreparedTxn): not served.
INIT_PRODUCER_ID_VERSIONS = (0, 5)
ADD_PARTITIONS_TO_TXN_VERSIONS = (0, 3)  # v4+: batched, verify_only -- brokers to the coordinator only
ADD_OFFSETS_TO_TXN_VERSIONS = (0, 4)
END_TXN_VERSIONS = (0, 4)  # v5: transactions V2 (the epoch bumped at the end)
TXN_OFFSET_COMMIT_VERSIONS = (0, 4)  # v5: transactions V2 (the group added implicitly)
DESCRIBE_TRANSACTIONS_VERSIONS = (0, 0)
LIST_TRANSACTIONS_VERSIONS = (0, 1)  # v2: KIP-1152's transactional id pattern
CLIENT_TRANSACTION_VERSION = 1
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

#: Kafka's transaction states (TransactionState), as DescribeTransactions and ListTransactions name them.
STATES = frozenset({"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                    "Dead", "PrepareEpochFence"})

# The first version of each API that knows PRODUCER_FENCED (KIP-588) and TRANSACTION_ABORTABLE (KIP-890).
_FENCED_SINCE = {INIT_PRODUCER_ID: 4, ADD_PARTITIONS_TO_TXN: 2, ADD_OFFSETS_TO_TXN: 2, END_TXN: 2,
                 TXN_OFFSET_COMMIT: 0}
_ABORTABLE_SINCE = {INIT_PRODUCER_ID: 5, ADD_PARTITIONS_TO_TXN: 5, ADD_OFFSETS_TO_TXN: 4, END_TXN: 4,
                    TXN_OFFSET_COMMIT: 4}


def client_error(code: int, api_key: int, version: int) -> int:
    """The coordinator's error as the request's version can name it."""
    if code == ErrorCode.PRODUCER_FENCED and version < _FENCED_SINCE.get(api_key, 0):
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)
    if code == ErrorCode.TRANSACTION_ABORTABLE and version < _ABORTABLE_SINCE.get(api_key, 0):
        return int(ErrorCode.INVALID_TXN_STATE)
    return int(code)


def _txn_denied(apis: KafkaApis, ctx: RequestContext, tid: str | None) -> int:
    """0, or TRANSACTIONAL_ID_AUTHORIZATION_FAILED (audited) without WRITE on the transactional id."""
    access = apis.pipeline.access
    if not access.enabled or access.check(ctx, WRITE, TRANSACTIONAL_ID, tid or ""):
        return 0
    return int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


def _router(apis: KafkaApis) -> TxnRouter:
    router: TxnRouter | None = getattr(apis, "txn", None)
    if router is None:
        router = apis.txn = TxnRouter(apis.broker)
    return router


def _group_router(apis: KafkaApis) -> CoordinatorRouter:
    router: CoordinatorRouter | None = apis.groups
    if router is None:
        raise NoCoordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no link to the group coordinators")
    return router


def _ms(td: Any) -> int:
    return int(td.total_seconds() * 1000) if hasattr(td, "total_seconds") else int(td)


async def handle_init_producer_id(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    """No transactional id: an idempotent producer's id from this broker. Else the transaction
    coordinator's: it bumps the epoch (fencing the earlier producer) and completes or aborts the open
    transaction; v3+ may ask to bump the producer's own id and epoch (KIP-360)."""
    b = req.body
    v = req.api.version
    none = {"producer_id": -1, "producer_epoch": -1}
    if b.transactional_id is None:
        a = await init_producer_id_api.init_producer_id(apis.broker, None, ErrorCode.INVALID_REQUEST, ctx=ctx)
        return {"error_code": int(a.error), "producer_id": a.producer_id, "producer_epoch": a.producer_epoch}, 0
    if denied := _txn_denied(apis, ctx, b.transactional_id):
        return {"error_code": denied, **none}, 0
    request = tpb.TxnInitProducerIdRequest(
        transactional_id=b.transactional_id, transaction_timeout_ms=_ms(b.transaction_timeout),
        producer_id=int(getattr(b, "producer_id", -1)), producer_epoch=int(getattr(b, "producer_epoch", -1)),
        client_transaction_version=CLIENT_TRANSACTION_VERSION)
    try:
        r = await _router(apis).call(b.transactional_id, "InitProducerId", request)
    except NoCoordinator as exc:
        return {"error_code": int(exc.code), **none}, 0
    if r.error_code:
        return {"error_code": client_error(r.error_code, INIT_PRODUCER_ID, v), **none}, 0
    return {"error_code": 0, "producer_id": r.producer_id, "producer_epoch": r.producer_epoch}, 0


async def handle_add_partitions_to_txn(apis: KafkaApis, req: RequestFrame, ctx: RequestContext,
                                       conn: Connection) -> Reply:
    """v0-3 (a client's): one transaction; a request-level error is every partition's, as Kafka answers."""
    b = req.body
    v = req.api.version
    tid = b.v3_and_below_transactional_id
    request = tpb.AddPartitionsToTxnRequest(
        transactional_id=tid, producer_id=int(b.v3_and_below_producer_id),
        producer_epoch=int(b.v3_and_below_producer_epoch), verify_only=False,
        client_transaction_version=CLIENT_TRANSACTION_VERSION,
        topics=[tpb.TxnTopic(name=t.name, partitions=[int(p) for p in t.partitions]) for t in b.v3_and_below_topics])
    codes: dict[tuple[str, int], int] = {}
    every = _txn_denied(apis, ctx, tid)
    access = apis.pipeline.access
    refused = {t.name for t in b.v3_and_below_topics if not access.check(ctx, WRITE, TOPIC, t.name)} \
        if access.enabled and not every else set()
    if refused:  # Kafka: the refused topics' error, the others not attempted, nothing forwarded
        codes = {(t.name, int(p)): int(ErrorCode.TOPIC_AUTHORIZATION_FAILED if t.name in refused
                                       else ErrorCode.OPERATION_NOT_ATTEMPTED)
                 for t in b.v3_and_below_topics for p in t.partitions}
    elif not every:
        try:
            r = await _router(apis).call(tid, "AddPartitionsToTxn", request)
            every = r.error_code
            codes = {(t.name, p.partition): p.error_code for t in r.results for p in t.partitions}
        except NoCoordinator as exc:
            every = int(exc.code)
    # a partition the coordinator did not name was not attempted (Kafka: OPERATION_NOT_ATTEMPTED)
    missing = int(ErrorCode.OPERATION_NOT_ATTEMPTED) if not every else every
    return {"results_by_topic_v3_and_below": [
        {"name": t.name, "results_by_partition": [
            {"partition_index": int(p),
             "partition_error_code": client_error(every or codes.get((t.name, int(p)), missing),
                                                  ADD_PARTITIONS_TO_TXN, v)}
            for p in t.partitions]}
        for t in b.v3_and_below_topics]}, 0


async def handle_add_offsets_to_txn(apis: KafkaApis, req: RequestFrame, ctx: RequestContext,
                                    conn: Connection) -> Reply:
    b = req.body
    request = tpb.AddOffsetsToTxnRequest(transactional_id=b.transactional_id, producer_id=int(b.producer_id),
                                         producer_epoch=int(b.producer_epoch), group_id=b.group_id,
                                         client_transaction_version=CLIENT_TRANSACTION_VERSION)
    if denied := _txn_denied(apis, ctx, b.transactional_id):
        return {"error_code": denied}, 0
    access = apis.pipeline.access
    if access.enabled and not access.check(ctx, READ, GROUP, b.group_id):
        return {"error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED)}, 0
    try:
        r = await _router(apis).call(b.transactional_id, "AddOffsetsToTxn", request)
    except NoCoordinator as exc:
        return {"error_code": int(exc.code)}, 0
    return {"error_code": client_error(r.error_code, ADD_OFFSETS_TO_TXN, req.api.version)}, 0


async def handle_end_txn(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    b = req.body
    request = tpb.EndTxnRequest(transactional_id=b.transactional_id, producer_id=int(b.producer_id),
                                producer_epoch=int(b.producer_epoch), committed=bool(b.committed),
                                client_transaction_version=CLIENT_TRANSACTION_VERSION)
    if denied := _txn_denied(apis, ctx, b.transactional_id):
        return {"error_code": denied}, 0
    try:
        r = await _router(apis).call(b.transactional_id, "EndTxn", request)
    except NoCoordinator as exc:
        return {"error_code": int(exc.code)}, 0
    return {"error_code": client_error(r.error_code, END_TXN, req.api.version)}, 0


async def handle_txn_offset_commit(apis: KafkaApis, req: RequestFrame, ctx: RequestContext,
                                   conn: Connection) -> Reply:
    """KIP-447 (v3+): the consumer's group metadata lets the group coordinator refuse a zombie member;
    before v3 the member is not checked (generation -1, no member id)."""
    b = req.body
    v = req.api.version
    request = cpb.TxnOffsetCommitRequest(
        transactional_id=b.transactional_id, group_id=b.group_id, producer_id=int(b.producer_id),
        producer_epoch=int(b.producer_epoch), generation_id=int(getattr(b, "generation_id", -1)),
        member_id=getattr(b, "member_id", "") or "", group_instance_id=getattr(b, "group_instance_id", None) or "",
        topics=[cpb.OffsetCommitTopic(name=t.name, partitions=[
            cpb.OffsetCommitPartition(partition=p.partition_index, committed_offset=p.committed_offset,
                                      committed_leader_epoch=int(getattr(p, "committed_leader_epoch", -1)),
                                      committed_metadata=p.committed_metadata or "")
            for p in t.partitions]) for t in b.topics])
    codes: dict[tuple[str, int], int] = {}
    every = _txn_denied(apis, ctx, b.transactional_id)
    access = apis.pipeline.access
    if access.enabled and not every and not access.check(ctx, READ, GROUP, b.group_id):
        every = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    refused = {t.name for t in b.topics if not access.check(ctx, READ, TOPIC, t.name)} \
        if access.enabled and not every else set()
    if refused:
        kept = [t for t in request.topics if t.name not in refused]
        del request.topics[:]
        request.topics.extend(kept)
        codes = {(t.name, p.partition_index): int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                 for t in b.topics if t.name in refused for p in t.partitions}
    if not every and request.topics:
        try:
            r = await _group_router(apis).call(b.group_id, "TxnOffsetCommit", request)
            every = r.error_code
            codes.update({(t.name, p.partition): p.error_code for t in r.topics for p in t.partitions})
        except NoCoordinator as exc:
            every = int(exc.code)
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index,
         "error_code": client_error(every or codes.get((t.name, p.partition_index), 0), TXN_OFFSET_COMMIT, v)}
        for p in t.partitions]} for t in b.topics]}, 0


async def handle_describe_transactions(apis: KafkaApis, req: RequestFrame, ctx: RequestContext,
                                       conn: Connection) -> Reply:
    """Each id asked of its coordinator (the admin client sends ids to the broker FindCoordinator named;
    any broker answers here, forwarding)."""
    router = _router(apis)
    ids = list(req.body.transactional_ids)
    by_address: dict[str, list[str]] = {}
    answers: dict[str, dict[str, Any]] = {}
    access = apis.pipeline.access
    for tid in ids:
        if access.enabled and not access.check(ctx, DESCRIBE, TRANSACTIONAL_ID, tid):
            answers[tid] = _undescribed(tid, int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            continue
        try:
            by_address.setdefault(router.address_for(tid), []).append(tid)
        except NoCoordinator as exc:
            answers[tid] = _undescribed(tid, int(exc.code))
    for address, tids in by_address.items():
        try:
            r = await router.call_at(address, "DescribeTransactions",
                                     tpb.DescribeTransactionsRequest(transactional_ids=tids))
        except NoCoordinator as exc:
            answers.update({t: _undescribed(t, int(exc.code)) for t in tids})
            continue
        for d in r.transactions:
            if d.error_code:
                answers[d.transactional_id] = _undescribed(d.transactional_id, d.error_code)
                continue
            answers[d.transactional_id] = {
                "error_code": 0, "transactional_id": d.transactional_id, "transaction_state": d.state,
                "transaction_timeout": d.transaction_timeout_ms,
                "transaction_start_time": _time(d.transaction_start_time_ms), "producer_id": d.producer_id,
                "producer_epoch": d.producer_epoch,
                "topics": [{"topic": t.name, "partitions": list(t.partitions)} for t in d.topics]}
    return {"transaction_states": [answers.get(t) or _undescribed(t, int(ErrorCode.NOT_COORDINATOR))
                                   for t in ids]}, 0


def _time(ms: int) -> datetime.datetime:
    """A time in ms as kio's datetime field: -1 (no transaction started) written as -1, as Kafka does."""
    return _EPOCH + datetime.timedelta(milliseconds=ms)


def _undescribed(tid: str, code: int) -> dict[str, Any]:
    return {"error_code": code, "transactional_id": tid, "transaction_state": "", "transaction_timeout": 0,
            "transaction_start_time": _time(-1), "producer_id": -1, "producer_epoch": -1, "topics": []}


async def handle_list_transactions(apis: KafkaApis, req: RequestFrame, ctx: RequestContext,
                                   conn: Connection) -> Reply:
    """The transactions this broker is the coordinator of (FindCoordinator's answer): the admin client
    asks every broker and merges, so each transactional id is listed once, as ListGroups."""
    b = req.body
    filters = list(b.state_filters or ())
    unknown = [s for s in filters if s not in STATES]
    request = tpb.ListTransactionsRequest(state_filters=[s for s in filters if s in STATES],
                                          producer_id_filters=[int(p) for p in b.producer_id_filters or ()],
                                          duration_filter_ms=int(getattr(b, "duration_filter", -1)))
    router = _router(apis)
    access = apis.pipeline.access
    out: list[dict[str, Any]] = []
    error = 0
    if not (filters and not request.state_filters):  # only unknown states asked: nothing matches
        for address in router.all_addresses():
            try:
                r = await router.call_at(address, "ListTransactions", request)
            except NoCoordinator:
                error = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
                continue
            if r.error_code:
                error = r.error_code
            for t in r.transactions:
                if coordinator_node(apis, t.transactional_id, TRANSACTION_STATE_TOPIC) != apis.broker.broker_id:
                    continue
                if access.enabled and not access.allowed(ctx, DESCRIBE, TRANSACTIONAL_ID, t.transactional_id):
                    continue
                out.append({"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                            "transaction_state": t.transaction_state})
    return {"error_code": error, "unknown_state_filters": unknown, "transaction_states": out}, 0


def register(apis: KafkaApis) -> None:
    apis.register(INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSIONS, handle_init_producer_id)
    apis.register(ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_TO_TXN_VERSIONS, handle_add_partitions_to_txn)
    apis.register(ADD_OFFSETS_TO_TXN, ADD_OFFSETS_TO_TXN_VERSIONS, handle_add_offsets_to_txn)
    apis.register(END_TXN, END_TXN_VERSIONS, handle_end_txn)
    apis.register(TXN_OFFSET_COMMIT, TXN_OFFSET_COMMIT_VERSIONS, handle_txn_offset_commit)
    apis.register(DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_VERSIONS, handle_describe_transactions)
    apis.register(LIST_TRANSACTIONS, LIST_TRANSACTIONS_VERSIONS, handle_list_transactions)
