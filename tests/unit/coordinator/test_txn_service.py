"""The transaction coordinator service (services/coordinator/txn_service.py, api/txn_*.py): decisions
written then replayed, markers per partition with the coordinator epoch and their retries, completion,
resuming after a load, the timers and the producer-id allocator. A fake runtime and a fake marker sender;
no network (the integration test runs the real thing)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from services.coordinator.api.txn_add_offsets import txn_add_offsets
from services.coordinator.api.txn_add_partitions import txn_add_partitions
from services.coordinator.api.txn_describe import txn_describe
from services.coordinator.api.txn_end import txn_end
from services.coordinator.api.txn_init_producer_id import txn_init_producer_id
from services.coordinator.api.txn_list import txn_list
from services.coordinator.group import GroupError, fail
from services.coordinator.partition_kind import TRANSACTIONS
from services.coordinator.runtime import PartitionRuntime
from services.coordinator.txn.config import TxnConfig
from services.coordinator.txn.decisions import MarkerPlan
from services.coordinator.txn.state import TxnState
from services.coordinator.txn_service import ProducerIdAllocator, TxnPartitionShard, TxnService
from shared.errors import ErrorCode
from shared.offsets_topic import OFFSETS_TOPIC, partition_for
from shared.proto import transactions_pb2 as tpb
from shared.request_context import RequestContext
from shared.types import TopicPartition

S, E = TxnState, ErrorCode
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
CTX = RequestContext("txn", "test", "ANONYMOUS", "peer", 0.0)


@dataclass
class FakeWriter:
    producer_epoch: int = 7


@dataclass
class FakeView:
    brokers: dict[int, str] = field(default_factory=lambda: {1: "b1:1", 2: "b2:1"})
    topics: dict[str, tuple[str, int]] = field(default_factory=lambda: {"t": ("id", 2), OFFSETS_TOPIC: ("o", 6)})

    def partitions_of(self, topic: str) -> int:
        return self.topics.get(topic, ("", 0))[1]

    def owners_of(self, topic: str) -> dict[int, dict[str, Any]]:
        return {p: {"owner": "me", "address": "me:1"} for p in range(6)}


class FakeRuntime:
    def __init__(self) -> None:
        self.owned: dict[str, dict[int, PartitionRuntime]] = {TRANSACTIONS: {}}
        self.view = FakeView()
        self.clock_ms = 1_000_000
        self.log: list[tuple[bytes, bytes | None]] = []
        self.appends: list[int] = []  # records per write call
        self.fail_writes: GroupError | None = None
        self.write_gate: asyncio.Event | None = None

    def now_ms(self) -> int:
        return self.clock_ms

    async def write(self, pr: PartitionRuntime, recs: list[tuple[bytes, bytes | None]]) -> None:
        if self.write_gate is not None:
            await self.write_gate.wait()
        if self.fail_writes is not None:
            raise self.fail_writes
        self.log.extend(recs)
        self.appends.append(len(recs))

    def txn_runtime_for(self, txn_id: str) -> PartitionRuntime:
        pr = self.owned[TRANSACTIONS].get(0)
        if pr is None:
            raise fail(E.NOT_COORDINATOR, "not mine")
        if not pr.loaded:
            raise fail(E.COORDINATOR_LOAD_IN_PROGRESS, "loading")
        return pr


class FakeMarkers:
    """Answers per partition from a script (default NONE); records every round."""

    def __init__(self) -> None:
        self.script: dict[TopicPartition, list[ErrorCode]] = {}
        self.rounds: list[tuple[MarkerPlan, set[TopicPartition], int, set[TopicPartition]]] = []
        self.gate: asyncio.Event | None = None

    async def send(self, plan: MarkerPlan, partitions: set[TopicPartition], coordinator_epoch: int,
                   refresh: set[TopicPartition] = frozenset()) -> dict[TopicPartition, ErrorCode]:  # type: ignore[assignment]
        if self.gate is not None:
            await self.gate.wait()
        self.rounds.append((plan, set(partitions), coordinator_epoch, set(refresh)))
        return {tp: (self.script.get(tp) or [E.NONE]).pop(0) if self.script.get(tp) else E.NONE for tp in partitions}

    async def close(self) -> None:
        pass


class FakeEpochs:
    """The coordinator epoch as the writer's producer epoch (the etcd counter is tested in
    tests/unit/test_txn_coordinator_epoch.py)."""

    async def of(self, pr: PartitionRuntime) -> int:
        return pr.writer.producer_epoch  # type: ignore[union-attr]


class Rig:
    def __init__(self, config: TxnConfig | None = None) -> None:
        self.pids = iter(range(5000, 10_000))
        self.svc = TxnService(store=None, config=config or TxnConfig(), allocator=lambda: next(self.pids))  # type: ignore[arg-type]
        self.rt = FakeRuntime()
        self.svc.attach(self.rt)
        self.markers = FakeMarkers()
        self.svc.markers = self.markers  # type: ignore[assignment]
        self.svc.epochs = FakeEpochs()  # type: ignore[assignment]
        self.svc.ids = _Ready()  # type: ignore[assignment]
        self.pr = self.new_partition()
        self.offsets_calls: list[tuple[int, bool]] = []

        async def complete_txn_offsets(pr: Any, plan: MarkerPlan, p: int) -> ErrorCode:
            self.offsets_calls.append((p, plan.commit))
            return E.NONE

        self.svc.complete_txn_offsets = complete_txn_offsets  # type: ignore[method-assign]

    def new_partition(self) -> PartitionRuntime:
        pr = PartitionRuntime(0, self.svc.new_shard(0), 1, writer=FakeWriter(), loaded=True, kind=TRANSACTIONS)  # type: ignore[arg-type]
        self.rt.owned[TRANSACTIONS][0] = pr
        return pr

    @property
    def shard(self) -> TxnPartitionShard:
        return self.pr.shard

    async def init(self, txn: str = "tx", timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1) -> tpb.TxnInitProducerIdResponse:
        return await txn_init_producer_id(self.svc, CTX, tpb.TxnInitProducerIdRequest(
            transactional_id=txn, transaction_timeout_ms=timeout_ms, producer_id=pid, producer_epoch=epoch))

    async def add(self, pid: int, epoch: int, parts: list[TopicPartition], txn: str = "tx",
                  verify: bool = False) -> dict[TopicPartition, int]:
        topics: dict[str, list[int]] = {}
        for tp in parts:
            topics.setdefault(tp.topic, []).append(tp.partition)
        resp = await txn_add_partitions(self.svc, CTX, tpb.AddPartitionsToTxnRequest(
            transactional_id=txn, producer_id=pid, producer_epoch=epoch, verify_only=verify,
            topics=[tpb.TxnTopic(name=t, partitions=ps) for t, ps in topics.items()]))
        return {TopicPartition(r.name, p.partition): p.error_code for r in resp.results for p in r.partitions}

    async def end(self, pid: int, epoch: int, commit: bool, txn: str = "tx", version: int = 1) -> tpb.EndTxnResponse:
        return await txn_end(self.svc, CTX, tpb.EndTxnRequest(transactional_id=txn, producer_id=pid,
                                                              producer_epoch=epoch, committed=commit,
                                                              client_transaction_version=version))

    def state(self, txn: str = "tx") -> TxnState:
        return self.shard.txns[txn].state

    async def commit_with_markers_held(self) -> tpb.EndTxnResponse:
        """A V2 transaction on T0 committed while its markers wait for ``markers.gate``: PrepareCommit."""
        init = await self.init()
        await self.add(init.producer_id, 0, [T0])
        self.markers.gate = asyncio.Event()
        return await self.end(init.producer_id, 0, True, version=2)

    async def settle(self) -> None:
        """Let background marker tasks run to completion."""
        for _ in range(50):
            await asyncio.sleep(0)
        while self.svc._tasks:
            await asyncio.wait(list(self.svc._tasks), timeout=2)


class _Ready:
    """The allocator's surface the service uses, with ids always at hand."""

    async def ready(self, timeout_s: float = 5.0) -> None:
        pass

    def prefetch(self) -> None:
        pass

    async def close(self) -> None:
        pass


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture(autouse=True)
def _fast_retries(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr("services.coordinator.txn_service.MARKER_RETRY_S", 0.001)
    monkeypatch.setattr("services.coordinator.txn_service.MARKER_RETRY_MAX_S", 0.002)
    yield


# -- requests -------------------------------------------------------------------------------------

def test_init_add_commit_writes_then_replays_and_completes_after_the_markers() -> None:
    async def scenario() -> None:
        r = Rig()
        init = await r.init()
        assert (init.error_code, init.producer_id, init.producer_epoch) == (0, 5000, 0)
        assert len(r.rt.log) == 1 and r.state() == S.EMPTY
        assert await r.add(5000, 0, [T0, T1]) == {T0: 0, T1: 0}
        assert r.state() == S.ONGOING
        r.markers.gate = asyncio.Event()  # hold the markers: EndTxn is answered once PrepareCommit is durable
        end = await r.end(5000, 0, True)
        assert end.error_code == 0 and r.state() == S.PREPARE_COMMIT
        again = await r.init(pid=5000, epoch=0)  # the id is busy until the markers are written
        assert again.error_code == E.CONCURRENT_TRANSACTIONS
        assert (await r.add(5000, 0, [T0]))[T0] == E.CONCURRENT_TRANSACTIONS
        r.markers.gate.set()
        await r.settle()
        assert r.state() == S.COMPLETE_COMMIT
        ((plan, parts, coordinator_epoch, _),) = r.markers.rounds
        assert parts == {T0, T1} and plan.commit and coordinator_epoch == 7 and plan.producer_id == 5000
        assert len(r.rt.log) == 4  # Empty, Ongoing, PrepareCommit, CompleteCommit
    run(scenario())


def test_markers_are_retried_per_partition_and_moved_leaders_looked_up_again() -> None:
    async def scenario() -> None:
        r = Rig()
        init = await r.init()
        await r.add(init.producer_id, 0, [T0, T1])
        r.markers.script = {T0: [E.NOT_LEADER_OR_FOLLOWER, E.REQUEST_TIMED_OUT], T1: [E.NONE]}
        assert (await r.end(init.producer_id, 0, False)).error_code == 0
        await r.settle()
        rounds = [(parts, refresh) for _, parts, _, refresh in r.markers.rounds]
        assert rounds == [({T0, T1}, set()), ({T0}, {T0}), ({T0}, set())]
        assert r.state() == S.COMPLETE_ABORT
    run(scenario())


def test_unknown_partitions_are_dropped_and_a_fenced_coordinator_stops() -> None:
    async def scenario() -> None:
        r = Rig()
        init = await r.init()
        await r.add(init.producer_id, 0, [T0, T1])
        r.markers.script = {T0: [E.UNKNOWN_TOPIC_OR_PARTITION]}
        await r.end(init.producer_id, 0, True)
        await r.settle()
        assert r.state() == S.COMPLETE_COMMIT and len(r.markers.rounds) == 1

        init = await r.init("tx2")
        await r.add(init.producer_id, 0, [T0], txn="tx2")
        r.markers.script = {T0: [E.TRANSACTION_COORDINATOR_FENCED]}
        await r.end(init.producer_id, 0, True, txn="tx2")
        await r.settle()
        assert r.state("tx2") == S.PREPARE_COMMIT  # left to the partition's new owner
    run(scenario())


def test_markers_stop_once_the_partition_is_unloaded() -> None:
    async def scenario() -> None:
        r = Rig()
        init = await r.init()
        await r.add(init.producer_id, 0, [T0])
        r.markers.script = {T0: [E.NOT_LEADER_OR_FOLLOWER] * 1000}
        await r.end(init.producer_id, 0, True)
        await asyncio.sleep(0.02)
        r.pr.loaded = False
        del r.rt.owned[TRANSACTIONS][0]
        await r.settle()
        assert r.state() == S.PREPARE_COMMIT
    run(scenario())


def test_the_offsets_partition_is_completed_through_the_group_coordinator() -> None:
    async def scenario() -> None:
        r = Rig()
        init = await r.init()
        resp = await txn_add_offsets(r.svc, CTX, tpb.AddOffsetsToTxnRequest(
            transactional_id="tx", producer_id=init.producer_id, producer_epoch=0, group_id="g"))
        assert resp.error_code == 0
        await r.add(init.producer_id, 0, [T0])
        await r.end(init.producer_id, 0, True)
        await r.settle()
        assert r.offsets_calls == [(partition_for("g", 6), True)]
        assert [parts for _, parts, _, _ in r.markers.rounds] == [{T0}]
        assert r.state() == S.COMPLETE_COMMIT
    run(scenario())


def test_a_failed_write_frees_the_id_and_is_answered() -> None:
    async def scenario() -> None:
        r = Rig()
        r.rt.fail_writes = fail(E.NOT_COORDINATOR, "fenced")
        resp = await r.init()
        assert resp.error_code == E.NOT_COORDINATOR and resp.producer_id == -1
        assert r.shard.pending == {} and r.shard.txns == {}
        r.rt.fail_writes = None
        assert (await r.init()).error_code == 0
    run(scenario())


def test_routing_errors_and_bad_requests() -> None:
    async def scenario() -> None:
        r = Rig()
        r.pr.loaded = False
        assert (await r.init()).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
        r.pr.loaded = True
        assert (await r.init("")).error_code == E.INVALID_REQUEST
        assert (await r.init(timeout_ms=16 * 60_000)).error_code == E.INVALID_TRANSACTION_TIMEOUT
        init = await r.init()
        # a topic or partition that does not exist: UNKNOWN_TOPIC_OR_PARTITION, the rest not attempted
        assert await r.add(init.producer_id, 0, [T0, TopicPartition("t", 9), TopicPartition("nope", 0)]) == {
            T0: E.OPERATION_NOT_ATTEMPTED, TopicPartition("t", 9): E.UNKNOWN_TOPIC_OR_PARTITION,
            TopicPartition("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
        assert r.state() == S.EMPTY
        # KIP-890 part 1: verify_only writes nothing
        assert await r.add(init.producer_id, 0, [T0], verify=True) == {T0: E.TRANSACTION_ABORTABLE}
        await r.add(init.producer_id, 0, [T0])
        assert await r.add(init.producer_id, 0, [T0, T1], verify=True) == {T0: 0, T1: E.TRANSACTION_ABORTABLE}
    run(scenario())


def test_a_second_producer_fences_the_first() -> None:
    async def scenario() -> None:
        r = Rig()
        first = await r.init()
        await r.add(first.producer_id, first.producer_epoch, [T0])
        second = await r.init()  # aborts the open transaction first (the client retries)
        assert second.error_code == E.CONCURRENT_TRANSACTIONS
        await r.settle()
        assert r.state() == S.COMPLETE_ABORT
        assert [(p.commit, p.producer_epoch) for p, _, _, _ in r.markers.rounds] == [(False, 2)]
        second = await r.init()
        assert second.error_code == 0 and second.producer_epoch > first.producer_epoch
        old = await r.end(first.producer_id, first.producer_epoch, True)
        assert old.error_code == E.PRODUCER_FENCED
        assert (await r.add(first.producer_id, first.producer_epoch, [T0]))[T0] == E.PRODUCER_FENCED
    run(scenario())


def test_describe_and_list() -> None:
    async def scenario() -> None:
        r = Rig()
        init = await r.init()
        await r.add(init.producer_id, 0, [T1, T0])
        r.rt.clock_ms += 5000
        desc = await txn_describe(r.svc, CTX, tpb.DescribeTransactionsRequest(transactional_ids=["tx", "nope"]))
        one, unknown = desc.transactions
        assert (one.state, one.producer_id, one.transaction_timeout_ms) == ("Ongoing", init.producer_id, 60_000)
        assert [(t.name, list(t.partitions)) for t in one.topics] == [("t", [0, 1])]
        assert unknown.error_code == E.TRANSACTIONAL_ID_NOT_FOUND
        await r.init("other")
        listed = await txn_list(r.svc, CTX, tpb.ListTransactionsRequest(duration_filter_ms=-1))
        assert [(t.transactional_id, t.transaction_state) for t in listed.transactions] == [("other", "Empty"), ("tx", "Ongoing")]
        only = await txn_list(r.svc, CTX, tpb.ListTransactionsRequest(state_filters=["Ongoing"], duration_filter_ms=4000))
        assert [t.transactional_id for t in only.transactions] == ["tx"]
        longer = await txn_list(r.svc, CTX, tpb.ListTransactionsRequest(duration_filter_ms=6000))
        assert list(longer.transactions) == []
        r.pr.loaded = False
        assert (await txn_list(r.svc, CTX, tpb.ListTransactionsRequest())).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    run(scenario())


# -- loading and timers ----------------------------------------------------------------------------

def test_a_new_owner_finishes_what_the_log_leaves_prepared() -> None:
    async def scenario() -> None:
        r = Rig()
        init = await r.init()
        await r.add(init.producer_id, 0, [T0, T1])
        r.markers.gate = asyncio.Event()
        await r.end(init.producer_id, 0, True)
        log = list(r.rt.log)  # ends with PrepareCommit; this owner then "dies"
        for t in list(r.svc._tasks):
            t.cancel()
        await asyncio.sleep(0)
        r.markers.gate = None
        r.markers.rounds.clear()
        fresh = r.new_partition()
        fresh.writer = FakeWriter(producer_epoch=8)  # type: ignore[assignment]
        for key, value in log:
            fresh.shard.replay(key, value)
        r.pr = fresh
        assert r.state() == S.PREPARE_COMMIT
        await r.svc.resume(fresh)
        await r.settle()
        assert r.state() == S.COMPLETE_COMMIT
        assert [(parts, epoch) for _, parts, epoch, _ in r.markers.rounds] == [({T0, T1}, 8)]
    run(scenario())


def test_timed_out_transactions_are_aborted_and_ids_expire() -> None:
    async def scenario() -> None:
        r = Rig(TxnConfig(transactional_id_expiration_ms=60_000))
        init = await r.init(timeout_ms=1000)
        await r.add(init.producer_id, 0, [T0])
        assert await r.svc.abort_timed_out() == 0
        r.rt.clock_ms += 1001
        assert await r.svc.abort_timed_out() == 1
        await r.settle()
        m = r.shard.txns["tx"]
        assert m.state == S.COMPLETE_ABORT and m.producer_epoch == 1  # fenced: its producer's epoch is old
        assert (await r.end(init.producer_id, 0, True)).error_code == E.PRODUCER_FENCED
        assert await r.svc.remove_expired() == 0
        r.rt.clock_ms += 60_000
        assert await r.svc.remove_expired() == 1
        await r.settle()
        assert "tx" not in r.shard.txns and r.rt.log[-1][1] is None
    run(scenario())


def test_the_timers_run_at_their_intervals() -> None:
    async def scenario() -> None:
        r = Rig(TxnConfig(abort_timed_out_interval_ms=10))
        init = await r.init(timeout_ms=1)
        await r.add(init.producer_id, 0, [T0])
        r.rt.clock_ms += 10
        await r.svc.start()
        try:
            for _ in range(200):
                await asyncio.sleep(0.01)
                if r.state() == S.COMPLETE_ABORT:
                    break
            assert r.state() == S.COMPLETE_ABORT
        finally:
            await r.svc.stop()
    run(scenario())


# -- producer ids ----------------------------------------------------------------------------------

class FakeStore:
    def __init__(self) -> None:
        self.next = 0
        self.calls = 0
        self.gate = asyncio.Event()

        class K:
            @staticmethod
            def producer_ids() -> bytes:
                return b"/pids"

        self.keys = K()

    async def allocate_block(self, key: bytes, size: int) -> int:
        await self.gate.wait()
        self.calls += 1
        first, self.next = self.next, self.next + size
        return first


def test_producer_ids_come_from_etcd_blocks_with_one_reserved_ahead() -> None:
    async def scenario() -> None:
        store = FakeStore()
        ids = ProducerIdAllocator(store, block_size=3)  # type: ignore[arg-type]
        with pytest.raises(GroupError) as exc:
            ids()  # nothing at hand yet: the request is told to retry
        assert exc.value.code == E.COORDINATOR_LOAD_IN_PROGRESS
        store.gate.set()
        await ids.ready()
        await asyncio.sleep(0.01)
        assert ids.available == 6 and store.calls == 2  # the block in use and the one ahead
        assert [ids() for _ in range(4)] == [0, 1, 2, 3]  # moved to the block ahead, and reserved another
        await asyncio.sleep(0.01)
        assert store.calls == 3 and ids.available == 5
        assert [ids() for _ in range(5)] == [4, 5, 6, 7, 8]
        await ids.close()
    run(scenario())


def test_wait_finished_returns_once_the_markers_and_completion_are_written() -> None:
    """A request refused CONCURRENT_TRANSACTIONS while the ended transaction's markers are written can wait
    for them (``wait_finished``) and be decided again, instead of going back for a backoff."""
    async def scenario() -> None:
        r = Rig()
        init = await r.init()
        await r.add(init.producer_id, 0, [T0])
        assert not await r.svc.wait_finished(r.pr, "tx", 1.0)  # nothing being finished
        r.markers.gate = asyncio.Event()
        end = await r.end(init.producer_id, 0, True, version=2)
        assert end.error_code == 0 and r.state() == S.PREPARE_COMMIT
        assert await r.add(end.producer_id, end.producer_epoch, [T1]) == {T1: E.CONCURRENT_TRANSACTIONS}
        assert not await r.svc.wait_finished(r.pr, "tx", 0.01)  # markers held: timed out
        waiter = asyncio.ensure_future(r.svc.wait_finished(r.pr, "tx", 5.0))
        r.markers.gate.set()
        assert await waiter and r.state() == S.COMPLETE_COMMIT
        assert await r.add(end.producer_id, end.producer_epoch, [T1]) == {T1: E.NONE}
        assert not await r.svc.wait_finished(r.pr, "tx", 1.0)
    run(scenario())


def test_the_next_transactions_first_partition_is_written_with_the_completion() -> None:
    """V2: the partition leader's AddPartitionsToTxn for the next transaction, arriving while the markers of
    the last one are written, waits and is appended in the completion's write (one acks=all append fewer)."""
    async def scenario() -> None:
        r = Rig()
        end = await r.commit_with_markers_held()
        writes = len(r.rt.appends)
        adds = [asyncio.ensure_future(r.add(end.producer_id, end.producer_epoch, [tp])) for tp in (T1, T0)]
        await asyncio.sleep(0.01)
        assert not any(a.done() for a in adds) and r.state() == S.PREPARE_COMMIT
        r.markers.gate.set()
        assert [await a for a in adds] == [{T1: E.NONE}, {T0: E.NONE}]
        assert r.rt.appends[writes:] == [3]  # CompleteCommit and both adds in one write
        m = r.shard.txns["tx"]
        assert (m.state, m.producer_epoch, m.partitions) == (S.ONGOING, end.producer_epoch, frozenset({T0, T1}))
        assert not r.svc._riders and not r.shard.pending
    run(scenario())


def test_a_rider_of_a_completion_that_fails_is_answered_concurrent_transactions() -> None:
    async def scenario() -> None:
        r = Rig()
        end = await r.commit_with_markers_held()
        add = asyncio.ensure_future(r.add(end.producer_id, end.producer_epoch, [T1]))
        await asyncio.sleep(0.01)
        r.rt.fail_writes = fail(E.NOT_ENOUGH_REPLICAS, "ISR too small")
        r.markers.gate.set()
        assert await add == {T1: E.CONCURRENT_TRANSACTIONS}
        assert r.state() == S.PREPARE_COMMIT and not r.shard.pending and not r.svc._riders
        r.rt.fail_writes = None  # the retry, once the completion is written
        r.svc.start_markers(r.pr, MarkerPlan("tx", end.producer_id, end.producer_epoch, True, frozenset({T0})))
        await r.settle()
        assert await r.add(end.producer_id, end.producer_epoch, [T1]) == {T1: E.NONE}
    run(scenario())


def test_a_loaded_partition_takes_its_coordinator_epoch_at_once() -> None:
    async def scenario() -> None:
        r = Rig()
        taken: list[int] = []

        class Epochs:
            async def of(self, pr: PartitionRuntime) -> int:
                taken.append(pr.partition)
                return 1

        r.svc.epochs = Epochs()  # type: ignore[assignment]
        await r.svc.resume(r.pr)
        await r.settle()
        assert taken == [0]  # before any transaction's markers
    run(scenario())
