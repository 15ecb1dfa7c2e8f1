"""The active controller's loop keeps its role through a brief etcd failure (its writes stay fenced by
the epoch) and gives it up once the lease may have expired, or at once when fenced or the lease is gone.

The store is an in-memory stand-in with the five calls the loop makes; the etcd behaviour itself (create
revisions, guarded transactions, leases) is covered against a real etcd by the integration suite."""

from __future__ import annotations

import asyncio
import contextlib
import time
from types import SimpleNamespace
from typing import Any

import pytest

from services.controller.election import ControllerElection, ControllerIdentity


class Store:
    def __init__(self) -> None:
        self.keys = SimpleNamespace(controller=lambda: b"/c", controller_heartbeat=lambda: b"/c/hb")
        self.holder: tuple[dict[str, Any], int] | None = None
        self.fail: type[BaseException] | None = None  # raised by every heartbeat write while set
        self.lease_alive = True
        self.heartbeats = 0
        self.ttl_s = 0.0  # > 0: the lease expires when not refreshed for this long, as etcd's does
        self.refreshed = time.monotonic()
        self.write_delay = 0.0  # seconds each heartbeat write takes (etcd's fsync on a loaded disk)

    async def lease(self, ttl: int) -> object:
        return SimpleNamespace(revoke=self._noop)

    async def _noop(self) -> None:
        return None

    async def create(self, key: bytes, value: dict[str, Any], lease: object) -> tuple[bool, int]:
        if self.holder is not None:
            return False, 0
        self.holder = (value, 7)
        return True, 7

    async def get(self, key: bytes) -> tuple[dict[str, Any], int, int] | None:
        return None if self.holder is None else (self.holder[0], self.holder[1], 0)

    def op_put(self, key: bytes, value: object) -> tuple[bytes, object]:
        return key, value

    async def guarded_txn(self, key: bytes, epoch: int, ops: list[Any], compares: list[Any] | None) -> bool:
        await asyncio.sleep(self.write_delay)
        if self.fail is not None:
            raise self.fail("etcd: deadline exceeded")
        self.heartbeats += 1
        return self.holder is not None and self.holder[1] == epoch

    async def delete_if_created(self, key: bytes, create_revision: int) -> bool:
        if self.holder is not None and self.holder[1] == create_revision:
            self.holder = None
            return True
        return False

    async def refresh(self, lease: object) -> bool:
        if self.fail is not None:
            raise self.fail("etcd: unavailable")
        if self.ttl_s and time.monotonic() - self.refreshed > self.ttl_s:
            self.lease_alive = False
        self.refreshed = time.monotonic()
        return self.lease_alive


async def _run(store: Store, steps: Any, ttl_s: int = 1) -> list[tuple[bool, int]]:
    changes: list[tuple[bool, int]] = []
    election = ControllerElection(store, ControllerIdentity(1, "127.0.0.1:1", ""), ttl_s=ttl_s, tick_s=0.02,  # type: ignore[arg-type]
                                  on_change=lambda active, epoch: changes.append((active, epoch)))
    task = asyncio.create_task(election.run())
    try:
        await steps(election)
        seen = list(changes)  # before the cancel below, which ends the role too
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return seen


async def _until(cond: Any, timeout: float = 3.0) -> None:
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.01)


def test_a_brief_etcd_failure_keeps_the_role_and_its_epoch() -> None:
    store = Store()

    async def steps(e: ControllerElection) -> None:
        await _until(lambda: store.heartbeats >= 2)
        store.fail = ConnectionError
        await asyncio.sleep(0.5)  # well under the 3 s session timeout
        assert e.active and e.epoch == 7
        store.fail = None
        seen = store.heartbeats
        await _until(lambda: store.heartbeats > seen + 2)
        assert e.epoch == 7

    assert asyncio.run(_run(store, steps, ttl_s=3)) == [(True, 7)]


def test_heartbeat_writes_slower_than_the_session_timeout_do_not_cost_the_lease() -> None:
    store = Store()
    store.ttl_s = 2.0

    async def steps(e: ControllerElection) -> None:
        await _until(lambda: store.heartbeats >= 1)
        store.write_delay = 2.5  # each write outlasts the lease: refreshed after one, it would have expired
        await asyncio.sleep(5.5)
        assert e.active and store.lease_alive

    assert asyncio.run(_run(store, steps, ttl_s=2)) == [(True, 7)]


def _break(store: Store, how: str) -> None:
    if how == "etcd unreachable":  # for longer than the 1 s session timeout
        store.fail = ConnectionError
    elif how == "fenced":  # another controller's key: the guarded write is refused
        store.holder = ({"id": 2}, 9)
    else:  # the lease is gone
        store.lease_alive = False


@pytest.mark.parametrize("how,ttl_s", [("etcd unreachable", 1), ("lease expired", 1),
                                       ("fenced", 30)])  # fenced: at once, long before a 30 s session timeout
def test_the_role_is_given_up(how: str, ttl_s: int) -> None:
    store = Store()

    async def steps(e: ControllerElection) -> None:
        await _until(lambda: e.active)
        _break(store, how)
        await _until(lambda: not e.active, timeout=10)

    assert asyncio.run(_run(store, steps, ttl_s=ttl_s))[:2] == [(True, 7), (False, 7)]


def test_a_cancel_that_meets_the_role_being_lost_ends_the_loop() -> None:
    """The active loop waits for ``_lost`` a tick at a time. Python 3.11's ``asyncio.wait_for`` returns the
    inner result when a cancel arrives as the inner wait completes (CPython gh-86296, gh-107547): the loop
    then lost its task's cancel, stepped down and campaigned on forever (a CI run's test hung 300 s). With
    ``asyncio.timeout`` the cancel ends it."""
    store = Store()

    async def main() -> bool:
        election = ControllerElection(store, ControllerIdentity(1, "127.0.0.1:1", ""), ttl_s=3,  # type: ignore[arg-type]
                                      tick_s=0.05)
        task = asyncio.create_task(election.run())
        await _until(lambda: election.active and store.heartbeats >= 2)
        await asyncio.sleep(0.01)  # inside the tick's wait for ``_lost``
        election._lost.set()  # both in one step: the wait completes as the cancel arrives
        task.cancel()
        try:
            async with asyncio.timeout(5):
                await task
        except asyncio.CancelledError:
            return True
        except TimeoutError:
            task.cancel()  # the old loop: give it another cancel so the test ends
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return False

    assert asyncio.run(main())
