"""The transaction coordinator service (issue 22): ``TxnShard`` (``services/coordinator/txn``) on the
``__transaction_state`` partitions the runtime owns, with the I/O the pure core leaves out.

Per decision (``apply``): ``begin`` (the id is busy), append its records through the partition's fenced,
``acks=all`` writer, ``replay`` them, answer; a decision with a ``MarkerPlan`` (PrepareCommit,
PrepareAbort) then has its markers written in the background (``finish``): one
``Broker.WriteTxnMarkers`` per partition leader, carrying the coordinator epoch (``CoordinatorEpochs``: a
per-partition ownership counter in etcd, bumped once by each new owner of the ``__transaction_state``
partition, so a deposed owner's markers are refused by the brokers as TRANSACTION_COORDINATOR_FENCED, even
after the owner's writer producer id rotated), retried per partition until
written; the transaction's ``__consumer_offsets`` partition (AddOffsetsToTxn) is completed through the
group coordinator instead (``complete_txn_offsets``). Then ``complete`` is decided and applied, together
with the requests that waited on it (``after_completion``: V2's next transaction's first partition, its
Ongoing record in the same append as CompleteCommit, one ``acks=all`` append fewer per transaction). EndTxn
is answered once PrepareX is durable, as Kafka; meanwhile the shard answers other requests for that id
CONCURRENT_TRANSACTIONS. A partition loaded by a new owner finishes every prepared transaction
(``resume``, the kind's ``on_loaded``).

Timers: timed-out transactions are aborted every
``transaction.abort.timed.out.transaction.cleanup.interval.ms`` (``TxnShard.expire_timed_out``) and
expired ids deleted every ``transaction.remove.expired.transaction.cleanup.interval.ms``
(``TxnShard.expire_ids``).

Producer ids come from blocks reserved in etcd, on the counter the brokers' idempotent producers use
(``ProducerIdAllocator``): the shard decides synchronously, so a block is kept at hand and the next one
reserved ahead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from services.coordinator.group import fail
from services.coordinator.partition_kind import TRANSACTIONS, PartitionKind, transactions_kind
from services.coordinator.record_builder import Rec
from services.coordinator.txn.config import TxnConfig
from services.coordinator.txn.decisions import Decision, MarkerPlan
from services.coordinator.txn.shard import TxnShard
from shared.errors import ErrorCode
from shared.metadata.store import MetadataStore
from shared.metadata.types import PartitionState
from shared.offsets_topic import OFFSETS_TOPIC
from shared.proto import coordinator_pb2 as cpb
from shared.proto import coordinator_pb2_grpc as cpb_grpc
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.security.transport import aio_channel
from shared.types import TopicPartition

log = logging.getLogger(__name__)
E = ErrorCode

#: producer ids reserved in etcd at a time (as the brokers' InitProducerId)
PRODUCER_ID_BLOCK = 1000
#: a marker (or offsets completion) round that did not finish every partition is retried after this
#: long, doubling up to MARKER_RETRY_MAX_S
MARKER_RETRY_S = 0.05
MARKER_RETRY_MAX_S = 1.0
MARKER_TIMEOUT_S = 35.0  # the broker waits up to 30 s for the ISR
#: marker answers after which a partition needs no marker from us: written; the partition is gone (etcd
#: has no such partition: Kafka drops deleted partitions too); a newer producer epoch already ended the
#: transaction there. A *broker's* UNKNOWN_TOPIC_OR_PARTITION is not "gone": ``MarkerSender`` turns it into
#: NOT_LEADER_OR_FOLLOWER, so the leader is looked up again and the marker retried, as Kafka retries it.
MARKER_DONE = frozenset({E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.INVALID_PRODUCER_EPOCH})
#: answers that mean the partition's leader moved: look it up again
LEADER_MOVED = frozenset({E.NOT_LEADER_OR_FOLLOWER, E.LEADER_NOT_AVAILABLE, E.FENCED_LEADER_EPOCH,
                          E.UNKNOWN_LEADER_EPOCH})
#: leader id meaning "no such partition in etcd"
NO_PARTITION = -2


class ProducerIdAllocator:
    """A sync source of producer ids for ``TxnShard``, fed by blocks of ``block_size`` reserved atomically
    in etcd (``MetadataStore.allocate_block`` on ``Keys.producer_ids``, the brokers' counter too, so ids
    are unique cluster-wide). One block is in use and the next one is reserved ahead; when both are
    empty (etcd slow or down) a call raises COORDINATOR_LOAD_IN_PROGRESS, which clients retry. Request
    handlers that may allocate ``await ready()`` first, so that is rare."""

    def __init__(self, store: MetadataStore, block_size: int = PRODUCER_ID_BLOCK) -> None:
        self.store = store
        self.block_size = block_size
        self._next = self._end = 0  # the block in use: [next, end)
        self._ahead: tuple[int, int] | None = None
        self._fetching: asyncio.Task[None] | None = None

    def __call__(self) -> int:
        if self._next >= self._end:
            if self._ahead is None:
                self.prefetch()
                raise fail(E.COORDINATOR_LOAD_IN_PROGRESS, "no producer ids at hand: a block is being reserved")
            self._next, self._end = self._ahead
            self._ahead = None
        pid = self._next
        self._next += 1
        if self._ahead is None:
            self.prefetch()
        return pid

    @property
    def available(self) -> int:
        ahead = self._ahead[1] - self._ahead[0] if self._ahead is not None else 0
        return self._end - self._next + ahead

    def prefetch(self) -> None:
        if self._fetching is None or self._fetching.done():
            self._fetching = asyncio.ensure_future(self._fill())

    async def ready(self, timeout_s: float = 5.0) -> None:
        """Wait (up to ``timeout_s``) until an id is at hand."""
        if self.available:
            return
        self.prefetch()
        assert self._fetching is not None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._fetching), timeout_s)

    async def _fill(self) -> None:
        while self._ahead is None:
            try:
                first = await self.store.allocate_block(self.store.keys.producer_ids(), self.block_size)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("producer id block reservation failed", extra={"error": str(exc)})
                await asyncio.sleep(1.0)
                continue
            if self._next >= self._end:
                self._next, self._end = first, first + self.block_size
            else:
                self._ahead = (first, first + self.block_size)

    async def close(self) -> None:
        if self._fetching is not None:
            self._fetching.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._fetching


#: the coordinator epoch is an int32 on the wire (WriteTxnMarkers, the marker's value)
MAX_COORDINATOR_EPOCH = 2**31 - 1


def coordinator_epoch_key(store: MetadataStore, partition: int) -> bytes:
    """The etcd key of a ``__transaction_state`` partition's coordinator-epoch counter (beside
    ``Keys.txn_owner``; it outlives every owner, as the producer key does)."""
    return store.keys.txn_coordinator_epoch(partition)


def next_coordinator_epoch(stored: int | None, writer_epoch: int) -> int:
    """The coordinator epoch a new owner of a ``__transaction_state`` partition takes: one more than the
    partition's counter in etcd. It counts ownerships, not the owner's writer producer epoch, which starts
    again at 0 when the writer's producer id rotates (epoch exhausted): brokers keep the highest
    coordinator epoch seen per producer and would refuse such an owner's markers. A partition without a
    counter yet (written before the counter existed, when the coordinator epoch was the writer's producer
    epoch) starts from this owner's writer epoch, above every marker its predecessors sent with that
    producer id."""
    epoch = max(writer_epoch, 0) if stored is None else stored + 1
    if epoch > MAX_COORDINATOR_EPOCH:
        raise fail(E.COORDINATOR_NOT_AVAILABLE, f"coordinator epoch {epoch} does not fit an int32")
    return epoch


class CoordinatorEpochs:
    """The coordinator epoch this instance's markers carry, per owned ``__transaction_state`` partition
    (Kafka uses the partition's leader epoch; Tidelog counts ownerships in etcd).

    Taken once per ownership (``PartitionRuntime``), before its first markers: the counter at
    ``coordinator_epoch_key`` is bumped in an etcd transaction that holds only while this instance's
    ownership key is the one it created (``owner_revision``). Owner N bumps while it owns the partition;
    owner N+1 exists only after N's ownership key is gone, and bumps after that, reading N's value: so
    every owner sends a higher epoch than every earlier one, whatever producer id its writer has. An
    instance that lost the partition gets None (its successor finishes the transactions)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._taken: dict[int, tuple[Any, int]] = {}  # partition -> (its PartitionRuntime, epoch)
        self._locks: dict[int, asyncio.Lock] = {}

    async def of(self, pr: Any) -> int | None:
        got = self._taken.get(pr.partition)
        if got is not None and got[0] is pr:
            return got[1]
        async with self._locks.setdefault(pr.partition, asyncio.Lock()):
            got = self._taken.get(pr.partition)
            if got is not None and got[0] is pr:
                return got[1]
            epoch = await self._bump(pr)
            if epoch is not None:
                self._taken[pr.partition] = (pr, epoch)
            return epoch

    async def _bump(self, pr: Any) -> int | None:
        key = coordinator_epoch_key(self.store, pr.partition)
        owner_key = self.store.keys.txn_owner(pr.partition)
        while True:
            got = await self.store.get(key)
            stored = int(got[0]["coordinator_epoch"]) if got is not None else None
            epoch = next_coordinator_epoch(stored, pr.writer.producer_epoch)
            unchanged = self.store.cmp_mod_revision(key, got[2]) if got is not None else self.store.cmp_absent(key)
            if await self.store.guarded_txn(owner_key, pr.owner_revision,
                                            [self.store.op_put(key, {"coordinator_epoch": epoch})], [unchanged]):
                return epoch
            owner = await self.store.get(owner_key)
            if owner is None or owner[1] != pr.owner_revision:
                return None  # the partition is someone else's now


class TxnPartitionShard(TxnShard):
    """``TxnShard`` as the runtime's ``CoordinatorShard``: the service drives its timers itself."""

    def loaded(self, now_ms: int) -> None:
        pass

    def expire(self, now_ms: int) -> list[Rec]:
        return []


class MarkerSender:
    """Writes transaction markers to the leaders of user partitions. Leaders are read from etcd
    (``/partitions/<topic>/<p>``; the coordinator's view follows internal topics only), cached, and
    read again for a partition whose broker said it no longer leads it."""

    def __init__(self, store: MetadataStore, brokers: Callable[[], dict[int, str]]) -> None:
        self.store = store
        self.brokers = brokers
        self.leaders: dict[TopicPartition, int] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def leader_of(self, tp: TopicPartition, refresh: bool = False) -> int:
        if refresh or tp not in self.leaders:
            got = await self.store.get(self.store.keys.partition(tp.topic, tp.partition))
            self.leaders[tp] = PartitionState.from_json(got[0]).leader if got is not None else NO_PARTITION
        return self.leaders[tp]

    def stub(self, address: str) -> pb_grpc.BrokerStub:
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = aio_channel(address)
        return pb_grpc.BrokerStub(ch)

    async def send(self, plan: MarkerPlan, partitions: set[TopicPartition], coordinator_epoch: int,
                   refresh: set[TopicPartition] = frozenset()) -> dict[TopicPartition, ErrorCode]:  # type: ignore[assignment]
        """One round: a WriteTxnMarkers to each leader of ``partitions`` at once; the answer per partition
        (a leader that is unknown, offline or unreachable answers LEADER_NOT_AVAILABLE /
        NOT_LEADER_OR_FOLLOWER / REQUEST_TIMED_OUT, which the caller retries)."""
        out: dict[TopicPartition, ErrorCode] = {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in sorted(partitions):
            leader = await self.leader_of(tp, tp in refresh)
            if leader == NO_PARTITION:
                out[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif leader < 0 or leader not in self.brokers():
                out[tp] = E.LEADER_NOT_AVAILABLE
            else:
                by_leader.setdefault(leader, []).append(tp)
        answers = await asyncio.gather(*(self._send_to(self.brokers()[b], plan, tps, coordinator_epoch)
                                         for b, tps in by_leader.items()))
        for a in answers:
            out.update(a)
        return out

    async def _send_to(self, address: str, plan: MarkerPlan, tps: list[TopicPartition],
                       coordinator_epoch: int) -> dict[TopicPartition, ErrorCode]:
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        req = pb.WriteTxnMarkersRequest(markers=[pb.WritableTxnMarker(
            producer_id=plan.producer_id, producer_epoch=plan.producer_epoch, committed=plan.commit,
            coordinator_epoch=coordinator_epoch,
            topics=[pb.WritableTxnMarkerTopic(name=t, partitions=ps) for t, ps in topics.items()])])
        try:
            resp = await self.stub(address).WriteTxnMarkers(req, timeout=MARKER_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            code = E.NOT_LEADER_OR_FOLLOWER if exc.code() == grpc.StatusCode.UNAVAILABLE else E.REQUEST_TIMED_OUT
            return {tp: code for tp in tps}
        out = {tp: E.REQUEST_TIMED_OUT for tp in tps}  # a partition the answer leaves out is retried
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition)
                    if tp in out:
                        out[tp] = not_hosted_is_moved(_code(p.error_code))
        return out

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()


def not_hosted_is_moved(code: ErrorCode) -> ErrorCode:
    """A broker's answer for one partition's marker, as ``finish`` should act on it. UNKNOWN_TOPIC_OR_PARTITION
    from a broker means it does not host the partition now (restarted and not yet given it, or no longer its
    leader), not that the partition is gone: dropping the marker then would leave the transaction's records
    open there, and the producer's next commit marker would commit an aborted transaction's records (seen
    under a leader kill). So it is retried against the leader etcd names; the partition counts as gone
    only when etcd has no record of it (``MarkerSender.send``)."""
    return E.NOT_LEADER_OR_FOLLOWER if code == E.UNKNOWN_TOPIC_OR_PARTITION else code


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return E.UNKNOWN_SERVER_ERROR


#: a request waiting on a transaction's completion: how to decide it on a shard, and its answer
Rider = tuple[Callable[[Any], Decision], "asyncio.Future[Decision | None]"]


def _release(riders: list[Rider]) -> None:
    """Riders not written with the completion: they decide again themselves."""
    for _, fut in riders:
        if not fut.done():
            fut.set_result(None)


class TxnService:
    """The transaction coordinator: what its API modules (``api/txn_*.py``) share. Build it before the
    runtime (``kind()`` goes into the runtime's kinds), then ``attach`` the runtime, ``start``."""

    def __init__(self, store: MetadataStore, config: TxnConfig | None = None,
                 allocator: Callable[[], int] | None = None) -> None:
        self.store = store
        self.config = config or TxnConfig()
        self.ids = ProducerIdAllocator(store)
        self.allocate: Callable[[], int] = allocator or self.ids
        self.runtime: Any = None  # CoordinatorRuntime, once attached
        self.markers: MarkerSender | None = None
        self.epochs = CoordinatorEpochs(store)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        #: (id of the PartitionRuntime, transactional id) whose markers are being written
        self._finishing: set[tuple[int, str]] = set()
        #: the same keys: set when that ``finish`` is over (``wait_finished``)
        self._finished: dict[tuple[int, str], asyncio.Event] = {}
        #: the same keys: requests waiting to be decided on that completion and written with it
        #: (``after_completion``), each resolved with its applied decision or None
        self._riders: dict[tuple[int, str], list[Rider]] = {}
        #: the process's ServiceSecurity (set by the service at start; None or disabled: allow all) and the
        #: Access built over it (``services.coordinator.authz.access_of``)
        self.security: Any = None
        self._access: Any = None

    # -- wiring ---------------------------------------------------------------------------------

    def new_shard(self, partition: int) -> TxnPartitionShard:
        return TxnPartitionShard(partition, self.config, self.allocate)

    def kind(self) -> PartitionKind:
        return transactions_kind(self.new_shard, on_loaded=self.resume)

    def attach(self, runtime: Any) -> None:
        self.runtime = runtime
        self.markers = MarkerSender(self.store, lambda: runtime.view.brokers)

    async def start(self) -> None:
        self.ids.prefetch()
        self._spawn(self._every(lambda: self.config.abort_timed_out_interval_ms, self.abort_timed_out))
        self._spawn(self._every(lambda: self.config.remove_expired_interval_ms, self.remove_expired))

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.ids.close()
        if self.markers is not None:
            await self.markers.close()
        for ch in self._channels.values():
            await ch.close()

    def now_ms(self) -> int:
        return int(self.runtime.now_ms())

    def _spawn(self, aw: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(aw)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- deciding and applying ---------------------------------------------------------------------

    async def apply(self, pr: Any, d: Decision) -> Decision:
        """Write ``d``'s records (fenced, acks=all), replay them, then start its markers. Raises the
        write's error (NOT_COORDINATOR once the partition is lost) after freeing the id."""
        if not d.records:
            return d
        pr.shard.begin(d)
        try:
            await self.runtime.write(pr, list(d.records))
        except BaseException:
            pr.shard.abandon(d.transactional_id)
            raise
        for key, value in d.records:
            pr.shard.replay(key, value)
        if d.markers is not None:
            self.start_markers(pr, d.markers)
        return d

    def serving(self, pr: Any) -> bool:
        """Is ``pr`` still this instance's loaded partition (not unloaded, fenced or replaced)?"""
        return bool(pr.loaded) and self.runtime.owned[TRANSACTIONS].get(pr.partition) is pr

    async def resume(self, pr: Any) -> None:
        """A partition was loaded: take its coordinator epoch (in the background) and finish every
        transaction the log leaves prepared."""
        self._spawn(self._take_epoch(pr))
        plans = pr.shard.unfinished()
        if plans:
            log.info("resuming prepared transactions",
                     extra={"partition": pr.partition, "transactions": [p.transactional_id for p in plans]})
        for plan in plans:
            self.start_markers(pr, plan)

    async def _take_epoch(self, pr: Any) -> None:
        """Bump the partition's coordinator epoch in etcd now, as Kafka's coordinator has its epoch once
        the partition is loaded, rather than on its first transaction's markers: that etcd round trip
        (tens of ms) would otherwise hold the first commit's completion, and the next transaction of the
        id waits for it (CONCURRENT_TRANSACTIONS). If it fails, ``finish`` takes it as before."""
        try:
            await self.epochs.of(pr)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info("coordinator epoch not taken at load", extra={"partition": pr.partition, "error": str(exc)})

    def start_markers(self, pr: Any, plan: MarkerPlan) -> None:
        key = (id(pr), plan.transactional_id)
        if key in self._finishing:
            return
        self._finishing.add(key)
        done = self._finished[key] = asyncio.Event()
        task = self._spawn(self.finish(pr, plan))

        def finished(_t: asyncio.Task[Any]) -> None:
            self._finishing.discard(key)
            if self._finished.get(key) is done:
                del self._finished[key]
            _release(self._riders.pop(key, []))  # not taken: decided again now
            done.set()

        task.add_done_callback(finished)

    async def wait_finished(self, pr: Any, transactional_id: str, timeout_s: float) -> bool:
        """Wait (up to ``timeout_s``) until the markers and completion of ``transactional_id``'s ended
        transaction are written; False if none was being written. For a request answered
        CONCURRENT_TRANSACTIONS only because of that (V2: the partition leader adding the next
        transaction's first partition right after EndTxn): decided again once it is over, it need not
        go back to be retried after a backoff."""
        done = self._finished.get((id(pr), transactional_id))
        if done is None:
            return False
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), timeout_s)
        return done.is_set()

    async def after_completion(self, pr: Any, transactional_id: str, decide: Callable[[Any], Decision],
                               timeout_s: float) -> Decision | None:
        """For a request answered CONCURRENT_TRANSACTIONS while ``transactional_id``'s ended transaction
        is being finished (V2: the partition leader adding the next transaction's first partition right
        after EndTxn): wait (up to ``timeout_s``) and have ``decide`` (a shard -> Decision) made on the
        completed state, its record appended together with the completion's. Returns the applied
        decision -- taken with the completion, or decided and applied again once it is over -- or None
        if nothing was being finished or it did not end in time."""
        key = (id(pr), transactional_id)
        if key not in self._finished:
            return None
        fut: asyncio.Future[Decision | None] = asyncio.get_running_loop().create_future()
        self._riders.setdefault(key, []).append((decide, fut))
        try:
            rode = await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return None  # (``finish`` skips a cancelled rider; one already written is seen on the retry)
        if rode is not None:
            return rode
        return await self.apply(pr, decide(pr.shard))

    async def finish(self, pr: Any, plan: MarkerPlan) -> bool:
        """Write ``plan``'s markers, then its completion. False if the partition was lost meanwhile (its
        next owner finishes the transaction) or the plan is stale."""
        where = {"transactional_id": plan.transactional_id, "producer_id": plan.producer_id,
                 "producer_epoch": plan.producer_epoch, "committed": plan.commit}
        todo = {tp for tp in plan.partitions if tp.topic != OFFSETS_TOPIC}
        offsets = {tp for tp in plan.partitions if tp.topic == OFFSETS_TOPIC}
        refresh: set[TopicPartition] = set()
        delay = MARKER_RETRY_S
        assert self.markers is not None
        while True:
            if not self.serving(pr):
                log.info("transaction markers left to the partition's next owner", extra=where)
                return False
            try:
                coordinator_epoch = await self.epochs.of(pr)
            except Exception as exc:  # etcd unreachable: no markers this round
                log.info("coordinator epoch not taken", extra={**where, "error": str(exc)})
                coordinator_epoch = -1
            if coordinator_epoch is None:
                log.info("transaction markers left to the partition's next owner (ownership lost)", extra=where)
                return False
            if todo and coordinator_epoch >= 0:
                try:
                    answers = await self.markers.send(plan, todo, coordinator_epoch, refresh)
                except Exception as exc:  # etcd unreachable while looking a leader up
                    log.info("transaction markers not sent", extra={**where, "error": str(exc)})
                    answers = {}
                refresh = set()
                for tp, code in answers.items():
                    if code in MARKER_DONE:
                        if code != E.NONE:
                            log.warning("transaction marker dropped", extra={**where, "tp": str(tp), "error": code.name})
                        todo.discard(tp)
                    elif code == E.TRANSACTION_COORDINATOR_FENCED:
                        log.warning("transaction markers fenced: a newer coordinator owns the partition", extra=where)
                        return False
                    elif code in LEADER_MOVED:
                        refresh.add(tp)
            for tp in sorted(offsets):
                if await self.complete_txn_offsets(pr, plan, tp.partition) == E.NONE:
                    offsets.discard(tp)
            if not todo and not offsets:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, MARKER_RETRY_MAX_S)
        if not self.serving(pr):
            return False
        d = pr.shard.complete(plan, self.now_ms())
        if not d.records:
            log.warning("transaction completion refused", extra={**where, "error": d.error.name, "reason": d.message})
            return False
        riders = [r for r in self._riders.pop((id(pr), plan.transactional_id), []) if not r[1].done()]
        taken: list[Decision | None] = []
        try:
            if riders:
                d, taken = pr.shard.then(d, [decide for decide, _ in riders])
        except Exception as exc:  # a rider's decision failed (no producer id at hand): decided again after
            log.info("transaction requests not decided with the completion", extra={**where, "error": str(exc)})
        try:
            await self.apply(pr, d)
        except Exception as exc:  # the partition is lost: its next owner loads PrepareX and finishes it
            log.info("transaction completion not written", extra={**where, "error": str(exc)})
            _release(riders)
            return False
        for (_, fut), rode in zip(riders, taken):
            if rode is not None and not fut.done():
                fut.set_result(rode)
        _release(riders)
        return True

    async def complete_txn_offsets(self, pr: Any, plan: MarkerPlan, offsets_partition: int) -> ErrorCode:
        """The hook for the transaction's ``__consumer_offsets`` partition (AddOffsetsToTxn): Tidelog's
        stand-in for a marker there is the group coordinator's CompleteTxnOffsets, sent to the owner of
        that partition (maybe this process). NONE once done; anything else is retried."""
        owner = self.runtime.view.owners_of(OFFSETS_TOPIC).get(offsets_partition) or {}
        address = owner.get("address")
        if not address:
            return E.COORDINATOR_NOT_AVAILABLE
        m = pr.shard.txns.get(plan.transactional_id)
        version = m.client_version if m is not None else 0
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = aio_channel(address)
        req = cpb.CompleteTxnOffsetsRequest(
            transactional_id=plan.transactional_id, producer_id=plan.producer_id, producer_epoch=plan.producer_epoch,
            committed=plan.commit, transaction_version=version, offsets_partition=offsets_partition)
        try:
            resp = await cpb_grpc.GroupCoordinatorStub(ch).CompleteTxnOffsets(req, timeout=MARKER_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            log.info("CompleteTxnOffsets failed", extra={"partition": offsets_partition, "error": str(exc.code())})
            return E.COORDINATOR_NOT_AVAILABLE
        return _code(resp.error_code)

    # -- timers ------------------------------------------------------------------------------------

    async def _every(self, interval_ms: Callable[[], int], work: Callable[[], Awaitable[Any]]) -> None:
        while True:
            await asyncio.sleep(interval_ms() / 1000)
            try:
                await work()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction timer failed")

    def loaded_partitions(self) -> list[Any]:
        if self.runtime is None:
            return []
        return [pr for pr in list(self.runtime.owned[TRANSACTIONS].values()) if pr.loaded]

    async def abort_timed_out(self) -> int:
        """Abort (and fence) every transaction open past its timeout; returns how many were started."""
        n = 0
        for pr in self.loaded_partitions():
            for d in pr.shard.expire_timed_out(self.now_ms()):
                log.info("aborting a timed-out transaction", extra={"transactional_id": d.transactional_id,
                                                                     "producer_id": d.producer_id})
                self._spawn(self._apply_quietly(pr, d))
                n += 1
        return n

    async def remove_expired(self) -> int:
        n = 0
        for pr in self.loaded_partitions():
            for d in pr.shard.expire_ids(self.now_ms()):
                self._spawn(self._apply_quietly(pr, d))
                n += 1
        return n

    async def _apply_quietly(self, pr: Any, d: Decision) -> None:
        with contextlib.suppress(Exception):
            await self.apply(pr, d)
