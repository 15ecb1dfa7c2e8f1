"""The coordinator's fenced writer against the broker's own producer-state rules (no network):
a takeover's marker at a higher producer epoch makes every later write of the old owner fail."""

from __future__ import annotations

import asyncio

from services.broker.producer_state import ProducerStateManager
from services.coordinator.group import GroupError
from services.coordinator.writer import PartitionWriter
from shared.errors import ErrorCode, TidelogError
from shared.proto import tidelog_pb2 as pb
from shared.records import BatchHeader


class OnePartitionBroker:
    """Produce on one partition, checked by the broker's ProducerStateManager."""

    def __init__(self) -> None:
        self.state = ProducerStateManager()
        self.next_offset = 0
        self.calls = 0

    async def Produce(self, request: pb.ProduceRequest, timeout: float) -> pb.ProduceResponse:
        self.calls += 1
        batch = request.topics[0].partitions[0].records
        h = BatchHeader.parse(batch)
        resp = pb.ProduceResponse()
        part = resp.topics.add(name=request.topics[0].name).partitions.add(partition=0)
        try:
            dup = self.state.check(h)
        except TidelogError as exc:
            part.error_code, part.error_message = exc.code, str(exc)
            return resp
        if dup is not None:
            part.base_offset = dup.first_offset
            return resp
        first = self.next_offset
        self.next_offset += h.last_offset_delta + 1
        self.state.update(h, first, self.next_offset - 1)
        part.base_offset = first
        return resp


def test_old_owner_is_fenced_by_the_new_owners_marker() -> None:
    async def scenario() -> None:
        broker = OnePartitionBroker()
        fenced: list[str] = []

        async def stub_for(_: int) -> OnePartitionBroker:
            return broker

        old = PartitionWriter(0, 7, 0, stub_for, fenced.append, "old")  # type: ignore[arg-type]
        assert await old.write([(b"k1", b"v1"), (b"k2", b"v2")]) == 1
        results = await asyncio.gather(*(old.write([(b"k", b"v")]) for _ in range(5)))  # group commit
        assert sorted(results)[-1] == 6 and broker.calls <= 3
        new = PartitionWriter(0, 7, 1, stub_for, lambda why: None, "new")  # type: ignore[arg-type]
        assert await new.write_marker() == 7
        try:
            await old.write([(b"late", b"write")])
            raise AssertionError("the old owner's write was accepted")
        except GroupError as exc:
            assert exc.code == ErrorCode.NOT_COORDINATOR
        assert fenced and "INVALID_PRODUCER_EPOCH" in fenced[0]
        assert broker.next_offset == 8  # nothing of the old owner's landed after the marker
        assert await new.write([(b"k3", b"v3")]) == 8
        await old.close()
        await new.close()

    asyncio.run(scenario())
