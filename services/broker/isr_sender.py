"""Sends this broker's ISR proposals to the active controller, and holds the channel to it.

Proposals are queued (``isr_batches``) and sent by one task, a batch per AlterPartition request, one
request in flight, as Kafka's AlterPartitionManager. The controller is dialled once, after a TCP probe
(``shared.netprobe``), by one caller at a time: thousands of concurrent per-partition requests each
probing the controller kept a restarted leader at 100 % CPU without a single ISR change getting through.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import grpc

from services.broker.isr_batches import IsrChangeQueue, IsrProposal
from shared.errors import ErrorCode
from shared.netprobe import tcp_reachable_async
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.security.transport import aio_channel
from shared.types import TopicPartition

if TYPE_CHECKING:
    from services.broker.partition import Partition
    from services.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

#: An AlterPartition batch covers up to ~1,000 partitions (a few controller transactions).
ISR_REQUEST_TIMEOUT_S = 15.0
#: After a failed or refused AlterPartition request, wait this long before the next one.
ISR_RETRY_BACKOFF_S = 0.5


class IsrSender:
    def __init__(self, rm: ReplicaManager) -> None:
        self.rm = rm
        self.queue = IsrChangeQueue()
        self._task: asyncio.Task[None] | None = None
        self._channel: tuple[str, grpc.aio.Channel] | None = None
        self._dial_lock = asyncio.Lock()

    # -- the controller ---------------------------------------------------------------------------

    async def controller_stub(self) -> pb_grpc.ControllerStub | None:
        """A stub for the active controller; dialled only after a TCP probe (see shared.netprobe).
        One caller dials at a time: the others wait for its channel rather than probing too."""
        ctl = self.rm.view.controller
        if not ctl:
            return None
        address = ctl["address"]
        async with self._dial_lock:
            if self._channel is None or self._channel[0] != address:
                await self.forget_controller()
                if not await tcp_reachable_async(address):
                    return None
                self._channel = (address, aio_channel(address))
            return pb_grpc.ControllerStub(self._channel[1])

    async def forget_controller(self) -> None:
        if self._channel is not None:
            old, self._channel = self._channel, None
            await old[1].close()

    # -- proposals ----------------------------------------------------------------------------------

    def busy(self, part: Partition) -> bool:
        return part.isr_change_in_flight or self.queue.busy(part.tp)

    def propose(self, part: Partition, new_isr: list[int]) -> None:
        """Queue ``new_isr`` for ``part``; in flight from now on: its high watermark counts the union
        of both ISRs until the proposal is settled (``Partition.isr_proposal_done``, ``update_state``)."""
        part.propose_isr(new_isr)
        self.queue.propose(IsrProposal(part.tp, part.leader_epoch, part.partition_epoch, tuple(new_isr)))
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._send_all())

    async def _send_all(self) -> None:
        """Send the queued proposals, a batch per request, until none is left."""
        while True:
            batch = self.queue.next_batch()
            if not batch:
                return
            answers: dict[TopicPartition, int] = {}  # error code per answered proposal (0: applied)
            try:
                await self._send(batch, answers)
            finally:
                for prop in self.queue.complete():
                    part = self.rm.partitions.get(prop.tp)
                    if part is not None:
                        part.isr_proposal_done(answers.get(prop.tp), int(ISR_RETRY_BACKOFF_S * 1000))

    async def _send(self, batch: list[IsrProposal], answers: dict[TopicPartition, int]) -> None:
        """Send ``batch``; ``answers`` gets the controller's error code for each proposal it answered."""
        stub = await self.controller_stub()
        if stub is None:
            await asyncio.sleep(ISR_RETRY_BACKOFF_S)  # no controller reachable: the next round proposes again
            return
        parts = self.rm.partitions
        isr_before = {p.tp: len(parts[p.tp].isr) for p in batch if p.tp in parts}
        items = [pb.AlterPartitionItem(topic=p.tp.topic, partition=p.tp.partition, leader_epoch=p.leader_epoch,
                                       partition_epoch=p.partition_epoch, new_isr=p.new_isr) for p in batch]
        try:
            resp = await stub.AlterPartition(pb.AlterPartitionRequest(
                broker_id=self.rm.broker_id, incarnation=self.rm.incarnation, items=items), timeout=ISR_REQUEST_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            log.info("AlterPartition failed", extra={"partitions": len(batch), "error": str(exc.code())})
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                await self.forget_controller()
            await asyncio.sleep(ISR_RETRY_BACKOFF_S)
            return
        if resp.error_code != 0:
            log.info("AlterPartition refused", extra={"partitions": len(batch), "error": ErrorCode(resp.error_code).name})
            await asyncio.sleep(ISR_RETRY_BACKOFF_S)
            return
        refused = 0
        for prop, r in zip(batch, resp.items):
            answers[prop.tp] = r.error_code
            if r.error_code != 0:
                refused += 1
                log.debug("AlterPartition refused", extra={"tp": str(prop.tp), "error": ErrorCode(r.error_code).name})
            elif prop.tp in parts:
                self.rm.isr_changed(parts[prop.tp], isr_before.get(prop.tp, len(r.isr)), r)
        log.info("ISR changes sent", extra={"partitions": len(batch), "refused": refused})

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await self.forget_controller()
