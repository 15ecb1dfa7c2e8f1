"""The transaction coordinator's coordinator epoch (services/coordinator/txn_service.py,
``CoordinatorEpochs``): every new owner of a ``__transaction_state`` partition sends a higher epoch than
every earlier owner, including after its writer's producer id rotated (writer epoch back to 0), and a
deposed owner gets none. An in-memory stand-in for the few etcd calls it makes (compare-and-put with
revisions, as etcd answers them); the integration tests run it against real etcd."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.coordinator.group import GroupError
from services.coordinator.partition_kind import TRANSACTIONS
from services.coordinator.runtime import PartitionRuntime
from services.coordinator.txn_service import (
    MAX_COORDINATOR_EPOCH,
    CoordinatorEpochs,
    coordinator_epoch_key,
    next_coordinator_epoch,
)
from shared.metadata.keys import Keys


class MemoryEtcd:
    """Keys with create and mod revisions from one revision counter, as etcd keeps them."""

    def __init__(self) -> None:
        self.keys = Keys("c")
        self.revision = 1
        self.kv: dict[bytes, tuple[Any, int, int]] = {}
        self.txns = 0

    async def get(self, key: bytes) -> tuple[Any, int, int] | None:
        await asyncio.sleep(0)
        return self.kv.get(key)

    def _put(self, key: bytes, value: Any) -> None:
        self.revision += 1
        old = self.kv.get(key)
        self.kv[key] = (value, old[1] if old else self.revision, self.revision)

    def cmp_mod_revision(self, key: bytes, revision: int) -> Any:
        return lambda: key in self.kv and self.kv[key][2] == revision

    def cmp_absent(self, key: bytes) -> Any:
        return lambda: key not in self.kv

    def op_put(self, key: bytes, value: Any) -> Any:
        return key, value

    async def guarded_txn(self, guard_key: bytes, guard_create_revision: int, ops: list[Any],
                          compares: list[Any] | None = None) -> bool:
        await asyncio.sleep(0)
        self.txns += 1
        got = self.kv.get(guard_key)
        if got is None or got[1] != guard_create_revision or not all(c() for c in compares or []):
            return False
        for key, value in ops:
            self._put(key, value)
        return True

    # what the runtime does (``CoordinatorRuntime._claim`` / ``_unload``), for the test
    def claim(self, partition: int, instance: str, writer_epoch: int) -> PartitionRuntime:
        key = self.keys.txn_owner(partition)
        assert key not in self.kv, "the previous owner must be gone first"
        self._put(key, {"owner": instance})
        return PartitionRuntime(partition, None, self.kv[key][1], writer=_Writer(writer_epoch), loaded=True,  # type: ignore[arg-type]
                                kind=TRANSACTIONS)

    def release(self, partition: int) -> None:
        self.revision += 1
        del self.kv[self.keys.txn_owner(partition)]


class _Writer:
    def __init__(self, producer_epoch: int) -> None:
        self.producer_epoch = producer_epoch


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_the_rule_counts_owners_not_writer_epochs() -> None:
    assert next_coordinator_epoch(None, 12) == 12  # no counter yet: above what the old rule sent
    assert next_coordinator_epoch(None, -1) == 0
    assert next_coordinator_epoch(40, 0) == 41  # a rotated writer (epoch 0) still goes up
    assert next_coordinator_epoch(40, 32_767) == 41
    with pytest.raises(GroupError):
        next_coordinator_epoch(MAX_COORDINATOR_EPOCH, 0)


def test_each_new_owner_sends_a_higher_epoch_even_after_the_writer_rotates() -> None:
    async def scenario() -> None:
        etcd = MemoryEtcd()
        seen = []
        # writer epochs as the runtime hands them out: bumped per takeover, then a new producer id at 0
        for i, writer_epoch in enumerate([32_765, 32_766, 32_767, 0, 1, 0]):
            pr = etcd.claim(3, f"coordinator-{i % 2}", writer_epoch)
            epochs = CoordinatorEpochs(etcd)  # type: ignore[arg-type]  (a fresh process each time)
            got = await epochs.of(pr)
            assert got is not None
            assert await epochs.of(pr) == got  # taken once per ownership
            seen.append(got)
            etcd.release(3)
        assert seen == [32_765, 32_766, 32_767, 32_768, 32_769, 32_770]
        assert etcd.kv[coordinator_epoch_key(etcd, 3)][0] == {"coordinator_epoch": 32_770}  # type: ignore[arg-type]
        other = etcd.claim(4, "coordinator-0", 9)  # partitions count apart
        assert await CoordinatorEpochs(etcd).of(other) == 9  # type: ignore[arg-type]

    run(scenario())


def test_a_deposed_owner_gets_no_epoch_and_does_not_move_the_counter() -> None:
    async def scenario() -> None:
        etcd = MemoryEtcd()
        old = etcd.claim(0, "a", 5)
        old_epochs = CoordinatorEpochs(etcd)  # type: ignore[arg-type]
        etcd.release(0)  # a lost lease: the key went before the old owner took its epoch
        new = etcd.claim(0, "b", 0)
        assert await CoordinatorEpochs(etcd).of(new) == 0  # type: ignore[arg-type]
        assert await old_epochs.of(old) is None
        assert etcd.kv[coordinator_epoch_key(etcd, 0)][0] == {"coordinator_epoch": 0}  # type: ignore[arg-type]
        # the same instance reclaiming the partition later is a new ownership: a new epoch
        etcd.release(0)
        again = etcd.claim(0, "a", 1)
        assert await old_epochs.of(again) == 1

    run(scenario())


def test_concurrent_takers_in_one_process_bump_once() -> None:
    async def scenario() -> None:
        etcd = MemoryEtcd()
        pr = etcd.claim(1, "a", 2)
        epochs = CoordinatorEpochs(etcd)  # type: ignore[arg-type]
        got = await asyncio.gather(*(epochs.of(pr) for _ in range(5)))
        assert got == [2] * 5 and etcd.txns == 1

    run(scenario())


@given(st.lists(st.tuples(st.integers(0, 32_767), st.booleans()), min_size=1, max_size=30))
def test_epochs_rise_across_any_sequence_of_owners(owners: list[tuple[int, bool]]) -> None:
    """Any writer epochs (rotations included), some owners deposed before they take theirs: the epochs the
    owners that send markers take are strictly increasing."""
    async def scenario() -> list[int]:
        etcd = MemoryEtcd()
        out = []
        for writer_epoch, deposed in owners:
            pr = etcd.claim(0, "x", writer_epoch)
            epochs = CoordinatorEpochs(etcd)  # type: ignore[arg-type]
            if deposed:
                etcd.release(0)
                assert await epochs.of(pr) is None
                continue
            got = await epochs.of(pr)
            assert got is not None
            out.append(got)
            etcd.release(0)
        return out

    seen = run(scenario())
    assert all(a < b for a, b in zip(seen, seen[1:], strict=False))


def test_finish_leaves_the_markers_to_the_next_owner_when_no_epoch_is_had() -> None:
    from services.coordinator.txn.decisions import MarkerPlan
    from shared.types import TopicPartition
    from tests.unit.coordinator.test_txn_service import Rig

    class Deposed:
        async def of(self, pr: Any) -> None:
            return None

    async def scenario() -> None:
        r = Rig()
        r.svc.epochs = Deposed()  # type: ignore[assignment]
        plan = MarkerPlan("tx", 5000, 1, True, frozenset({TopicPartition("t", 0)}))
        assert await r.svc.finish(r.pr, plan) is False
        assert r.markers.rounds == []

    run(scenario())
