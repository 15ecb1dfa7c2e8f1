"""The active controller creates the internal topics: ``__consumer_offsets`` when the cluster first
starts, ``__transaction_state`` on first use.

``__consumer_offsets``: ``offsets.topic.num.partitions`` partitions (50), replication factor
``offsets.topic.replication.factor`` (3) or the broker count if smaller, ``cleanup.policy=compact``.
At start brokers register one by one, so the topic is created once the wanted replication factor
is reachable, or once the live broker count has not changed for ``wait_s`` (a cluster with fewer
brokers).

``__transaction_state``: ``transaction.state.log.num.partitions`` (50), replication factor
``transaction.state.log.replication.factor`` (3) or the broker count if smaller, compact,
``min.insync.replicas`` ``transaction.state.log.min.isr`` (2, bounded by the replication factor),
``segment.bytes`` 100 MiB (``shared.txn_topic``). Kafka creates it on the first FindCoordinator for
a transactional id; here whoever gets that request (a coordinator instance) writes the request key
``Keys.internal_topic_request`` and this loop, running once ``__consumer_offsets`` exists, creates
the topic. A cluster that never uses transactions never carries its partitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from services.controller.election import ControllerElection
from services.controller.topics import TopicManager
from shared.offsets_topic import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIGS, offsets_replication_factor
from shared.txn_topic import (
    DEFAULT_TRANSACTION_STATE_MIN_ISR,
    DEFAULT_TRANSACTION_STATE_PARTITIONS,
    DEFAULT_TRANSACTION_STATE_REPLICATION_FACTOR,
    DEFAULT_TRANSACTION_STATE_SEGMENT_BYTES,
    TRANSACTION_STATE_TOPIC,
    txn_replication_factor,
    txn_topic_configs,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TransactionStateTopic:
    """The controller's transaction.state.log.* configs."""
    #: transaction.state.log.num.partitions
    partitions: int = DEFAULT_TRANSACTION_STATE_PARTITIONS
    #: transaction.state.log.replication.factor
    replication_factor: int = DEFAULT_TRANSACTION_STATE_REPLICATION_FACTOR
    #: transaction.state.log.min.isr
    min_isr: int = DEFAULT_TRANSACTION_STATE_MIN_ISR
    #: transaction.state.log.segment.bytes
    segment_bytes: int = DEFAULT_TRANSACTION_STATE_SEGMENT_BYTES


async def ensure_offsets_topic(topics: TopicManager, election: ControllerElection, partitions: int,
                               replication_factor: int = 3, wait_s: float = 1.5, tick_s: float = 0.25,
                               transaction_state: TransactionStateTopic | None = TransactionStateTopic()) -> None:
    """Run until ``__consumer_offsets`` exists (created by this controller or another), then, unless
    ``transaction_state`` is None, until ``__transaction_state`` exists (created once requested)."""
    await _ensure_offsets_topic(topics, election, partitions, replication_factor, wait_s, tick_s)
    if transaction_state is not None:
        await ensure_transaction_state_topic(topics, election, transaction_state, wait_s)


async def _ensure_offsets_topic(topics: TopicManager, election: ControllerElection, partitions: int,
                                replication_factor: int, wait_s: float, tick_s: float) -> None:
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


async def ensure_transaction_state_topic(topics: TopicManager, election: ControllerElection,
                                         spec: TransactionStateTopic = TransactionStateTopic(),
                                         wait_s: float = 1.5, idle_s: float = 30.0) -> None:
    """Run until ``__transaction_state`` exists; this controller creates it, while active, once its
    request key exists. Waits on a watch of that key (a tick of ``idle_s`` covers anything missed),
    then looks every ``wait_s`` until the topic is there."""
    requested = asyncio.Event()
    key = topics.keys.internal_topic_request(TRANSACTION_STATE_TOPIC)
    watch = topics.store.watch_prefix(key, lambda snap: requested.set() if snap else None,
                                      "transaction state request")
    try:
        while True:
            if not requested.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(requested.wait(), idle_s)
            if await _create_transaction_state_topic(topics, election, spec, key):
                return
            await asyncio.sleep(wait_s)
    finally:
        watch.cancel()


async def _create_transaction_state_topic(topics: TopicManager, election: ControllerElection,
                                          spec: TransactionStateTopic, key: bytes) -> bool:
    """True once ``__transaction_state`` exists."""
    try:
        if TRANSACTION_STATE_TOPIC in await topics.topic_names():
            return True
        if not election.active or await topics.store.get(key) is None:
            return False
        count = len(await topics.live_brokers())
        if count == 0:
            return False
        rf = txn_replication_factor(count, spec.replication_factor)
        configs = txn_topic_configs(rf, spec.min_isr, spec.segment_bytes)
        await topics.create_internal(TRANSACTION_STATE_TOPIC, spec.partitions, rf, configs)
        log.info("created __transaction_state", extra={"partitions": spec.partitions, "replication_factor": rf,
                                                       "min_insync_replicas": configs["min.insync.replicas"]})
        return True
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a concurrent creation, a lost election: look again next tick
        log.info("__transaction_state not created yet", extra={"error": str(exc)})
        return False
