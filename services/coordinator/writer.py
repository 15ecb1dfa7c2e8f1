"""Fenced writes of one partition of an internal topic (``__consumer_offsets``, ``__transaction_state``):
an idempotent producer per partition.

The owner writes with the partition's producer id at the epoch it bumped in etcd when it
took the partition over. Its first write is a marker (a tombstone whose key names no
group, or no transactional id), which makes the brokers refuse any batch of a lower epoch: a previous owner that
wakes up after a pause gets INVALID_PRODUCER_EPOCH and stops serving. Records wait in a
queue and go out together, one batch in flight at a time (its sequence numbers must not
have gaps), ``acks=all``; a batch whose outcome is unknown is resent as is (the broker
recognises a duplicate). A write that cannot be completed fences this owner itself: the
partition is released and reloaded from the log by whoever takes it next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import grpc

from services.coordinator.group import fail
from services.coordinator.record_builder import Rec
from shared.errors import ErrorCode
from shared.offsets_topic import OFFSETS_TOPIC
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.records import encode_batch

log = logging.getLogger(__name__)

FENCING_CODES = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED,
                           ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID})
MAX_RECORDS_PER_BATCH = 2000
MARKER_KEY = b"\x00\x03\x00\x00"  # ConsumerGroupMetadataKey with an empty group id: names no group

StubFor = Callable[[int], Awaitable[pb_grpc.BrokerStub | None]]


class FencedError(Exception):
    """This owner can no longer write the partition."""


class PartitionWriter:
    def __init__(self, partition: int, producer_id: int, producer_epoch: int, stub_for: StubFor,
                 on_fenced: Callable[[str], None], client_id: str, write_timeout_s: float = 15.0, *,
                 topic: str = OFFSETS_TOPIC, marker_key: bytes = MARKER_KEY) -> None:
        self.topic = topic
        self.marker_key = marker_key
        self.partition = partition
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.stub_for = stub_for
        self.on_fenced = on_fenced
        self.client_id = client_id
        self.write_timeout_s = write_timeout_s
        self.sequence = 0
        self.fenced: str | None = None
        self._pending: list[tuple[list[Rec], asyncio.Future[int]]] = []
        self._inflight: list[tuple[list[Rec], asyncio.Future[int]]] = []
        self._wakeup = asyncio.Event()
        self._task = asyncio.ensure_future(self._run())

    async def write(self, recs: list[Rec]) -> int:
        """Append ``recs``; returns the offset of the last once committed (``acks=all``)."""
        return await self.submit(recs)

    def submit(self, recs: list[Rec]) -> asyncio.Future[int]:
        """Queue ``recs`` now (writes go out in the order they are submitted); the future gives the
        offset of the last once committed."""
        if self.fenced is not None:
            raise fail(ErrorCode.NOT_COORDINATOR,
                       f"no longer the owner of {self.topic} partition {self.partition}: {self.fenced}")
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if not recs:
            fut.set_result(-1)
            return fut
        self._pending.append((recs, fut))
        self._wakeup.set()
        return fut

    async def write_marker(self) -> int:
        return await self.write([(self.marker_key, None)])

    async def close(self) -> None:
        self.fenced = self.fenced or "partition unloaded"
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._fail_all("partition unloaded")

    def _fail_all(self, why: str) -> None:
        for _, fut in self._inflight + self._pending:
            if not fut.done():
                fut.set_exception(fail(ErrorCode.NOT_COORDINATOR, f"partition {self.partition}: {why}"))
        self._inflight.clear()
        self._pending.clear()

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                taken, n = self._inflight, 0
                while self._pending and (not taken or n + len(self._pending[0][0]) <= MAX_RECORDS_PER_BATCH):
                    item = self._pending.pop(0)
                    taken.append(item)
                    n += len(item[0])
                try:
                    last = await self._send([rec for recs, _ in taken for rec in recs])
                except FencedError as exc:
                    self.fenced = str(exc)
                    for _, fut in taken:
                        if not fut.done():
                            fut.set_exception(fail(ErrorCode.NOT_COORDINATOR, f"partition {self.partition}: {exc}"))
                    self._fail_all(str(exc))
                    self.on_fenced(str(exc))
                    return
                for _, fut in taken:
                    if not fut.done():
                        fut.set_result(last)
                self._inflight = []

    async def _send(self, recs: list[Rec]) -> int:
        now = int(time.time() * 1000)
        batch = encode_batch([(now, k, v, None) for k, v in recs], producer_id=self.producer_id,
                             producer_epoch=self.producer_epoch, base_sequence=self.sequence)
        request = pb.ProduceRequest(acks=-1, timeout_ms=5000, client_id=self.client_id, topics=[
            pb.ProduceTopicData(name=self.topic, partitions=[pb.ProducePartitionData(partition=self.partition, records=batch)])])
        deadline = time.monotonic() + self.write_timeout_s
        last_error = ""
        while time.monotonic() < deadline:
            stub = await self.stub_for(self.partition)
            if stub is not None:
                try:
                    resp = await stub.Produce(request, timeout=6)
                    pr = resp.topics[0].partitions[0]
                    if pr.error_code == 0:
                        self.sequence += len(recs)
                        return pr.base_offset + len(recs) - 1
                    if pr.error_code in FENCING_CODES:
                        raise FencedError(f"{ErrorCode(pr.error_code).name}: {pr.error_message}")
                    last_error = f"{pr.error_code}: {pr.error_message}"
                except grpc.aio.AioRpcError as exc:
                    last_error = str(exc.code())
            await asyncio.sleep(0.1)
        raise FencedError(f"write not acknowledged within {self.write_timeout_s}s ({last_error})")
