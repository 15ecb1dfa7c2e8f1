"""The async side of classic groups: runs the shard's pure decisions (``classic.py``), writes their
records, and delivers the responses of parked JoinGroup/SyncGroup requests once those records are
committed. Decides nothing itself.

Delivery rule: the responses of one decision go out when its records are committed, or, if it has
none, when the partition's last classic write is (so no answer gets ahead of a record it follows
from). Deliveries hang off the write futures, so they happen even if the request that caused them
was cancelled. A failed write unloads the partition (see ``writer.py``), which fails every parked
request of the partition with NOT_COORDINATOR. Timers: ``run_timers`` sleeps until the earliest
deadline of any loaded partition's classic groups, or until an operation may have moved one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from services.coordinator.classic_messages import (
    Decisions,
    JoinRequest,
    JoinResponse,
    LeaveMember,
    SyncRequest,
    SyncResponse,
)
from services.coordinator.group import GroupError, fail
from shared.errors import ErrorCode

if TYPE_CHECKING:
    from services.coordinator.runtime import CoordinatorRuntime, PartitionRuntime

log = logging.getLogger(__name__)
R = TypeVar("R", JoinResponse, SyncResponse)
MAX_TIMER_SLEEP_S = 1.0


class ClassicGroupService:
    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.rt = runtime
        self._wakeup = asyncio.Event()

    # -- requests ---------------------------------------------------------------------------------

    async def join(self, req: JoinRequest) -> JoinResponse:
        pr = self.rt.runtime_for(req.group_id)
        answer, decisions = pr.shard.join_group(req, self.rt.now_ms())
        return await self._answer(pr, answer, decisions)

    async def sync(self, req: SyncRequest) -> SyncResponse:
        pr = self.rt.runtime_for(req.group_id)
        answer, decisions = pr.shard.sync_group(req, self.rt.now_ms())
        return await self._answer(pr, answer, decisions)

    async def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode:
        pr = self.rt.runtime_for(group_id)
        return pr.shard.classic_heartbeat(group_id, member_id, instance_id, generation_id, self.rt.now_ms())

    async def leave(self, group_id: str, members: list[LeaveMember]) -> tuple[ErrorCode, list[ErrorCode]]:
        pr = self.rt.runtime_for(group_id)
        error, codes, decisions = pr.shard.leave_group(group_id, members, self.rt.now_ms())
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._apply(pr, decisions, lambda exc: _settle(done, None, exc))
        await done
        return error, codes

    async def _answer(self, pr: PartitionRuntime, answer: R | int, decisions: Decisions) -> R:
        """Wait for this request's response: given now (sent once the decision's records are committed)
        or, for a parked request, delivered by this or a later decision."""
        own: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if isinstance(answer, int):
            pr.waiters[answer] = own
            self._apply(pr, decisions)
        else:
            self._apply(pr, decisions, lambda exc: _settle(own, answer, exc))
        try:
            result: R = await own
            return result
        finally:
            if isinstance(answer, int):
                pr.waiters.pop(answer, None)

    # -- applying decisions -----------------------------------------------------------------------

    def _apply(self, pr: PartitionRuntime, d: Decisions,
               then: Callable[[BaseException | None], None] | None = None) -> None:
        """Write ``d``'s records, then deliver its responses and call ``then`` (with the write's error,
        if it failed)."""
        self._wakeup.set()  # deadlines may have moved

        def deliver(f: asyncio.Future[int] | None) -> None:
            error: BaseException | None = None
            if f is not None and (f.cancelled() or f.exception() is not None):
                why = "write cancelled" if f.cancelled() else str(f.exception())
                error = fail(ErrorCode.NOT_COORDINATOR, f"partition {pr.partition}: {why}")
            for ticket, response in [*d.joins.items(), *d.syncs.items()]:
                fut = pr.waiters.get(ticket)
                if fut is not None:
                    _settle(fut, response, error)
            if then is not None:
                then(error)

        if d.records:
            try:
                written = self.rt.submit(pr, d.records)
            except GroupError as exc:  # the writer is already fenced
                failed: asyncio.Future[int] = asyncio.get_running_loop().create_future()
                failed.set_exception(exc)
                deliver(failed)
                return
            pr.last_write = written
            written.add_done_callback(deliver)
        elif pr.last_write is not None and not pr.last_write.done():
            pr.last_write.add_done_callback(deliver)
        else:
            deliver(None)

    # -- timers ---------------------------------------------------------------------------------------

    async def run_timers(self) -> None:
        """Fire the classic groups' deadlines of every loaded partition, as they fall due."""
        while True:
            now = self.rt.now_ms()
            due = [d for pr in list(self.rt.partitions.values()) if pr.loaded
                   if (d := pr.shard.classic.next_deadline_ms()) is not None]
            sleep_s = min(MAX_TIMER_SLEEP_S, max(0.0, (min(due) - now) / 1000)) if due else MAX_TIMER_SLEEP_S
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), sleep_s)
            self._wakeup.clear()
            now = self.rt.now_ms()
            for pr in list(self.rt.partitions.values()):
                if not pr.loaded:
                    continue
                try:
                    decisions = pr.shard.expire_classic(now)
                    if decisions:
                        self._apply(pr, decisions)
                except Exception:
                    log.exception("classic group timers failed", extra={"partition": pr.partition})
            await asyncio.sleep(0)  # let the deliveries run before the next round


def _settle(fut: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)
