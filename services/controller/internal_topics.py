"""The active controller creates ``__consumer_offsets`` when the cluster first starts.

``offsets.topic.num.partitions`` partitions (50), replication factor
``offsets.topic.replication.factor`` (3) or the broker count if smaller,
``cleanup.policy=compact``. At start brokers register one by one, so the topic is
created once the wanted replication factor is reachable, or once the live broker
count has not changed for ``wait_s`` (a cluster with fewer brokers).
"""

from __future__ import annotations

import asyncio
import logging
import time

from services.controller.election import ControllerElection
from services.controller.topics import TopicManager
from shared.offsets_topic import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIGS, offsets_replication_factor

log = logging.getLogger(__name__)


async def ensure_offsets_topic(topics: TopicManager, election: ControllerElection, partitions: int,
                               replication_factor: int = 3, wait_s: float = 1.5, tick_s: float = 0.25) -> None:
    """Run until ``__consumer_offsets`` exists (created by this controller or another)."""
    last_count, stable_since = -1, time.monotonic()
    while True:
        await asyncio.sleep(tick_s)
        try:
            if OFFSETS_TOPIC in await topics.topic_names():
                return
            if not election.active:
                continue
            if not await topics.store.get_prefix(topics.keys.services_prefix("coordinator")):
                continue
            count = len(await topics.live_brokers())
            if count != last_count:
                last_count, stable_since = count, time.monotonic()
            if count == 0 or (count < replication_factor and time.monotonic() - stable_since < wait_s):
                continue
            rf = offsets_replication_factor(count, replication_factor)
            await topics.create_internal(OFFSETS_TOPIC, partitions, rf, dict(OFFSETS_TOPIC_CONFIGS))
            log.info("created __consumer_offsets", extra={"partitions": partitions, "replication_factor": rf})
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a concurrent creation, a lost election: look again next tick
            log.info("__consumer_offsets not created yet", extra={"error": str(exc)})
