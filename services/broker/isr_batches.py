"""ISR change proposals of this broker, sent to the controller in batches. Pure.

Kafka's AlterPartitionManager: a leader does not send one AlterPartition request per
partition; it queues its proposals and sends them together in one request, with at most
one request in flight. A proposal stays queued or in flight until the controller answers
(or the request fails); meanwhile the partition proposes nothing else. After a restart a
leader of thousands of partitions proposes thousands of ISR expansions at once: sent one
RPC (and one controller transaction) each, they took tens of seconds and starved the
event loops; batched, they take a few requests.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.types import TopicPartition

#: Partitions per AlterPartition request: the controller applies them in etcd transactions of
#: ~120 partition keys, so 1,000 is ~9 transactions, well under a second.
MAX_BATCH = 1000


@dataclass(frozen=True)
class IsrProposal:
    tp: TopicPartition
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


class IsrChangeQueue:
    """Proposals waiting to be sent, and the batch in flight."""

    def __init__(self, max_batch: int = MAX_BATCH) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.max_batch = max_batch
        self._queued: dict[TopicPartition, IsrProposal] = {}  # insertion order: oldest first
        self._in_flight: dict[TopicPartition, IsrProposal] = {}

    def busy(self, tp: TopicPartition) -> bool:
        """True while a proposal for ``tp`` is queued or in flight: propose nothing else for it."""
        return tp in self._queued or tp in self._in_flight

    def propose(self, proposal: IsrProposal) -> bool:
        """Queue ``proposal``; False (ignored) while the partition already has one pending."""
        if self.busy(proposal.tp):
            return False
        self._queued[proposal.tp] = proposal
        return True

    def next_batch(self) -> list[IsrProposal]:
        """The oldest queued proposals (at most ``max_batch``), now in flight; empty while a batch
        is already in flight (one request at a time) or nothing is queued."""
        if self._in_flight or not self._queued:
            return []
        batch = []
        for tp in list(self._queued)[: self.max_batch]:
            batch.append(self._queued.pop(tp))
            self._in_flight[tp] = batch[-1]
        return batch

    def complete(self, tps: list[TopicPartition] | None = None) -> list[IsrProposal]:
        """The in-flight batch is answered (or failed): those partitions may propose again.
        ``tps`` completes only those; None completes the whole batch. Returns the completed ones."""
        keys = list(self._in_flight) if tps is None else [tp for tp in tps if tp in self._in_flight]
        return [self._in_flight.pop(tp) for tp in keys]

    @property
    def queued(self) -> int:
        return len(self._queued)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)
