"""Automatic leader balancing (Kafka's ``auto.leader.rebalance.enable``): the rule, pure, and its loop.

Kafka's rule, per broker: the *imbalance ratio* is the number of partitions whose preferred
leader (first replica) is that broker but whose current leader is another broker, divided by
the number of partitions preferring it. When the ratio is above
``leader.imbalance.per.broker.percentage``, a preferred election is triggered for those of
its partitions whose preferred replica is alive and in the ISR. The check runs every
``leader.imbalance.check.interval.seconds`` while this controller is active.

``leader_imbalance`` and ``rebalance_candidates`` are pure; ``LeaderBalancer`` is the thin loop
that reads the state through the partition controller and applies the elections through its
preferred-election path (the same one ``ElectLeaders`` uses), with an injected clock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.metadata.types import PartitionState, TopicRecord
from shared.types import TopicPartition

log = logging.getLogger(__name__)

Topics = Mapping[str, TopicRecord]
States = Mapping[TopicPartition, PartitionState]


@dataclass(frozen=True)
class BrokerImbalance:
    broker: int
    preferred: int  # partitions whose preferred leader is this broker
    not_leading: int  # of those, how many another broker (or nobody) leads

    @property
    def ratio(self) -> float:
        return self.not_leading / self.preferred if self.preferred else 0.0


def _preferred(topics: Topics, tp: TopicPartition) -> int | None:
    t = topics.get(tp.topic)
    replicas = t.assignment.get(tp.partition) if t else None
    return replicas[0] if replicas else None


def leader_imbalance(topics: Topics, states: States, skip: Iterable[TopicPartition] = ()) -> dict[int, BrokerImbalance]:
    """Per preferred-leader broker, how many of its partitions it leads and does not.

    ``skip``: partitions left out (Kafka leaves out partitions being reassigned)."""
    skipped = set(skip)
    preferred: dict[int, int] = {}
    not_leading: dict[int, int] = {}
    for tp, st in states.items():
        if tp in skipped:
            continue
        pref = _preferred(topics, tp)
        if pref is None:
            continue
        preferred[pref] = preferred.get(pref, 0) + 1
        if st.leader != pref:
            not_leading[pref] = not_leading.get(pref, 0) + 1
    return {b: BrokerImbalance(b, n, not_leading.get(b, 0)) for b, n in sorted(preferred.items())}


def rebalance_candidates(
    topics: Topics, states: States, live: set[int], percentage: float, skip: Iterable[TopicPartition] = ()
) -> list[TopicPartition]:
    """The partitions to give back to their preferred leader: those of every broker whose
    imbalance ratio is above ``percentage`` %, whose preferred replica is alive and in the ISR."""
    skipped = set(skip)
    over = {b for b, imb in leader_imbalance(topics, states, skipped).items() if imb.ratio * 100 > percentage}
    out: list[TopicPartition] = []
    for tp, st in states.items():
        if tp in skipped:
            continue
        pref = _preferred(topics, tp)
        if pref in over and st.leader != pref and pref in live and pref in st.isr:
            out.append(tp)
    return sorted(out)


class LeaderBalancer:
    """Runs the check every interval while the controller is active.

    ``partitions`` is the ``PartitionController``: ``load()`` gives topics, states and live brokers,
    ``elect_preferred(only)`` applies preferred elections in a fenced transaction.
    ``reassigning`` (optional) names the partitions being reassigned, left alone as Kafka does."""

    def __init__(self, partitions: Any, is_active: Callable[[], bool], *, enabled: bool = True,
                 percentage: float = 10.0, interval_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic,
                 reassigning: Callable[[], Iterable[TopicPartition]] | None = None) -> None:
        self.partitions = partitions
        self.is_active = is_active
        self.enabled = enabled
        self.percentage = percentage
        self.interval_s = interval_s
        self.clock = clock
        self.reassigning = reassigning
        self._last = clock()
        self.runs = 0
        self.elected = 0

    def due(self) -> bool:
        return self.enabled and self.clock() - self._last >= self.interval_s

    async def check(self) -> list[TopicPartition]:
        """One check: elect preferred leaders where the rule says so; the partitions elected."""
        self._last = self.clock()
        self.runs += 1
        topics, states, live = await self.partitions.load()
        skip = set(self.reassigning()) if self.reassigning is not None else set()
        plain = {tp: s for tp, (s, _) in states.items()}
        wanted = rebalance_candidates(topics, plain, live, self.percentage, skip)
        if not wanted:
            return []
        changes = await self.partitions.elect_preferred(wanted)
        self.elected += len(changes)
        log.info("leader imbalance: preferred leaders elected", extra={
            "partitions": len(changes), "imbalance": str({b: round(i.ratio, 3) for b, i in
                                                          leader_imbalance(topics, plain, skip).items() if i.not_leading})})
        return sorted(changes)

    async def run(self, tick_s: float = 1.0) -> None:
        if not self.enabled:
            return
        while True:
            await asyncio.sleep(min(tick_s, self.interval_s))
            if not self.is_active():
                self._last = self.clock()  # a newly active controller waits a full interval, as Kafka's does
                continue
            if not self.due():
                continue
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # fenced, conflict, etcd hiccup: the next interval tries again
                log.info("leader imbalance check failed", extra={"error": str(exc)})

