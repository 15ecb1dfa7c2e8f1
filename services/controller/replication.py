"""Applies the controller's partition decisions: reacts to brokers coming and going,
serves AlterPartition and ControlledShutdown, runs preferred-leader elections.

Reads topics, partition states and live brokers from etcd, asks ``partitions``
(pure) what must change, and writes the changes in one transaction fenced by
the controller epoch and guarded by each partition key's mod revision. One
lock serialises every partition-state write of this controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

from services.controller.election import ConflictError, ControllerElection, FencedError
from services.controller.partitions import (
    AlterItem,
    alter_partition,
    alter_partitions,
    check_broker_epoch,
    eligible_brokers,
    on_brokers_changed,
    on_controlled_shutdown,
    preferred_elections,
)
from services.controller.reassignment import Request, Step, advance_all, alter_reassignments, describe
from shared.config import effective_configs
from shared.errors import ErrorCode, TidelogError
from shared.metadata.keys import Keys
from shared.metadata.store import MetadataStore, Snapshot
from shared.metadata.txn_limits import chunked
from shared.metadata.types import PartitionState, ReassignmentRecord, TopicRecord
from shared.netprobe import tcp_probe_async
from shared.types import TopicPartition

log = logging.getLogger(__name__)
#: Requests naming at most this many partitions read them key by key; more, with one read of everything.
SMALL_READ = 16
#: Partitions per reassignment transaction (each writes its state and record, guarded by both revisions).
STEP_CHUNK = 36

T = TypeVar("T")


async def run_to_the_end(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro``, which holds the controller's lock across a read, a check and an etcd write, as a
    task that runs to its end even when the caller is cancelled (an AlterPartition's deadline passed): a
    cancelled handler released the lock while its transaction could still commit, and the next proposal
    was judged against the state before it. A leader whose request failed keeps its proposal counted
    until a newer state settles it; this keeps "refused at these epochs" meaning "not applied"."""
    task = asyncio.ensure_future(coro)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # nobody waits for its result
        raise


class PartitionController:
    def __init__(self, store: MetadataStore, election: ControllerElection, *, reconcile_interval_s: float = 1.0,
                 auto_leader_rebalance: bool = True, rebalance_interval_s: float = 300.0) -> None:
        self.store = store
        self.keys: Keys = store.keys
        self.election = election
        self.reconcile_interval_s = reconcile_interval_s
        self.auto_leader_rebalance = auto_leader_rebalance
        self.rebalance_interval_s = rebalance_interval_s
        self.lock = asyncio.Lock()
        self._poke = asyncio.Event()
        self.refused: set[int] = set()  # registered brokers whose port refuses connections: crashed
        #: broker -> the incarnation that asked for a controlled shutdown; written through to etcd
        #: (``Keys.controlled_shutdown``) and read back by each newly active controller (``_load_shutdowns``)
        self.shutting_down: dict[int, str] = {}
        self._shutdowns_epoch = 0  # the controller epoch ``shutting_down`` was last read from etcd for
        self._eligible: set[int] = set()  # as live_brokers last found them (see leader_eligible)
        self._refusals: dict[int, int] = {}
        self._offline_seen: dict[TopicPartition, frozenset[int]] = {}  # offline partitions logged, with the live set
        self.observer: Any = None  # services.controller.metrics.ControllerObserver when metrics are on
        self.reassigning: set[TopicPartition] = set()  # partitions under reassignment, as last read
        self._brokers_seen: Snapshot | None = None  # the registered brokers, as the watch last read them

    # -- reading ------------------------------------------------------------------------------------

    async def load(self) -> tuple[dict[str, TopicRecord], dict[TopicPartition, tuple[PartitionState, int]], set[int]]:
        topics_snap = await self.store.get_prefix(self.keys.topics_prefix())
        topics = {t.name: t for t in (TopicRecord.from_json(v) for v, _, _ in topics_snap.values())}
        parts_snap = await self.store.get_prefix(self.keys.partitions_prefix())
        prefix = self.keys.partitions_prefix().decode()
        states: dict[TopicPartition, tuple[PartitionState, int]] = {}
        for key, (value, _, mod) in parts_snap.items():
            topic, _, p = key.decode()[len(prefix):].rpartition("/")
            states[TopicPartition(topic, int(p))] = (PartitionState.from_json(value), mod)
        if self.observer is not None:
            self.observer.loaded(states)
        return topics, states, await self.live_brokers()

    async def live_brokers(self) -> set[int]:
        """Registered brokers, minus those whose port refuses connections (crashed, lease not yet expired).
        Also refreshes ``_eligible`` from the same read (see ``leader_eligible``)."""
        if self.election.active and self._shutdowns_epoch != self.election.epoch:
            await self._load_shutdowns()
        brokers = await self.store.get_prefix(self.keys.brokers_prefix())
        registrations = [v for v, _, _ in brokers.values()]
        registered = {int(v["id"]): str(v.get("incarnation", "")) for v in registrations}
        for broker, incarnation in list(self.shutting_down.items()):  # restarted or gone: forget it
            if registered.get(broker) != incarnation:
                del self.shutting_down[broker]
                await self._forget_shutdown(broker)
        self._eligible = eligible_brokers(registrations, self.shutting_down, self.refused)
        return set(registered) - self.refused

    async def _load_shutdowns(self) -> None:
        """The controlled shutdowns in etcd, as this controller's own: a controller that takes over while a
        broker is between its controlled shutdown and its exit must not make it leader or ISR member
        again (Kafka keeps the mark in its metadata log)."""
        epoch = self.election.epoch
        snap = await self.store.get_prefix(self.keys.controlled_shutdowns_prefix())
        self.shutting_down = {int(self.keys.last_segment(k)): str(v.get("incarnation", ""))
                              for k, (v, _, _) in snap.items() if isinstance(v, dict)}
        self._shutdowns_epoch = epoch

    async def _forget_shutdown(self, broker: int) -> None:
        """The incarnation that asked is gone: its mark in etcd too (best effort: a later read retries)."""
        try:
            await self.election.write([self.store.op_delete(self.keys.controlled_shutdown(broker))])
        except Exception as exc:
            self._shutdowns_epoch = 0  # read the marks again next time, and retry then
            log.info("controlled-shutdown mark not deleted", extra={"broker": broker, "error": str(exc)})

    async def leader_eligible(self) -> set[int]:
        """The live brokers that may become a leader or join an ISR: not in a controlled shutdown. The
        reconcile still counts a shutting-down broker as live (it keeps leading what it could not hand over
        until it exits); preferred elections and ISR expansions use this."""
        await self.live_brokers()
        return self._eligible

    async def probe_brokers(self, interval_s: float = 0.25) -> None:
        """Treat a registered broker whose port refuses connections twice in a row as gone.

        A crashed broker's lease only expires after the session timeout; its closed port
        tells at once. A paused broker still accepts connections, so its lease decides.
        """
        while True:
            await asyncio.sleep(interval_s)
            if not self.election.active:
                continue
            brokers = self._brokers_seen  # kept by run()'s watch: no etcd read 4 times a second
            if brokers is None:
                try:
                    brokers = await self.store.get_prefix(self.keys.brokers_prefix())
                except Exception:
                    continue
            changed = False
            seen = set()
            for v, _, _ in brokers.values():
                bid = int(v["id"])
                seen.add(bid)
                state = await tcp_probe_async(v["address"], 0.2)
                if state == "refused":
                    self._refusals[bid] = self._refusals.get(bid, 0) + 1
                    if self._refusals[bid] >= 2 and bid not in self.refused:
                        self.refused.add(bid)
                        changed = True
                        log.info("broker port refuses connections: treating it as gone", extra={"broker": bid})
                elif state == "up":
                    self._refusals.pop(bid, None)
                    if bid in self.refused:
                        self.refused.discard(bid)
                        changed = True
            for bid in list(self.refused - seen):  # deregistered: the lease takes over
                self.refused.discard(bid)
            if changed:
                self.poke()

    # -- writing ------------------------------------------------------------------------------------

    async def _apply(self, changes: dict[TopicPartition, PartitionState],
                     revs: dict[TopicPartition, int], why: str, *, tolerate_conflicts: bool = False) -> set[TopicPartition]:
        """Write ``changes``; returns the partitions not written because a chunk met a concurrent change
        (only with ``tolerate_conflicts``: otherwise ``ConflictError`` propagates)."""
        not_written: set[TopicPartition] = set()
        # Each partition's change stands alone (guarded by its own revision), so a large change set is
        # applied in chunks under etcd's per-transaction limits.
        for chunk in chunked(list(changes.items())):
            ops = [self.store.op_put(self.keys.partition(tp.topic, tp.partition), st.to_json()) for tp, st in chunk]
            compares = [self.store.cmp_mod_revision(self.keys.partition(tp.topic, tp.partition), revs[tp]) for tp, _ in chunk]
            started = time.monotonic()
            try:
                await self.election.write(ops, compares, "partition state changed concurrently")
            except ConflictError:
                if not tolerate_conflicts:
                    raise
                not_written.update(tp for tp, _ in chunk)
                continue
            if self.observer is not None:
                self.observer.applied(dict(chunk), why, time.monotonic() - started)
            for tp, st in chunk:
                log.info("partition state changed", extra={"tp": str(tp), "why": why, "leader": st.leader,
                                                           "leader_epoch": st.leader_epoch, "isr": str(st.isr)})
        return not_written

    # -- triggers ------------------------------------------------------------------------------------

    def poke(self) -> None:
        self._poke.set()

    async def reconcile(self) -> None:
        """Elect leaders for partitions whose leader is gone, shrink ISRs of dead brokers."""
        async with self.lock:
            topics, states, live = await self.load()

            def unclean(topic: str) -> bool:
                t = topics.get(topic)
                return bool(t) and str(effective_configs(t.configs)["unclean.leader.election.enable"]).lower() == "true"

            changes = on_brokers_changed(topics, {tp: s for tp, (s, _) in states.items()}, live, unclean)
            await self._apply(changes, {tp: r for tp, (_, r) in states.items()}, "broker change")
            self._log_offline({tp: changes.get(tp, s) for tp, (s, _) in states.items()}, live)
            await self._advance_reassignments()

    def _log_offline(self, states: dict[TopicPartition, PartitionState], live: set[int]) -> None:
        """Say once per change of the live brokers that a partition stays offline, and why (Kafka logs
        the same when no ISR member is alive and unclean election is off)."""
        now = frozenset(live)
        for tp, st in states.items():
            if st.leader != -1:
                self._offline_seen.pop(tp, None)
            elif self._offline_seen.get(tp) != now:
                self._offline_seen[tp] = now
                log.warning("partition offline: no live ISR member to elect", extra={
                    "tp": str(tp), "isr": str(st.isr), "live": str(sorted(live))})

    def _on_brokers(self, snapshot: Snapshot) -> None:
        self._brokers_seen = snapshot
        self.poke()

    async def run(self) -> None:
        """While active: reconcile on every broker change (poke) and every interval; rebalance leaders."""
        self.store.watch_prefix(self.keys.brokers_prefix(), self._on_brokers, "controller-brokers")
        self.store.spawn(self.probe_brokers(), "broker probes")
        last_rebalance = asyncio.get_running_loop().time()
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._poke.wait(), self.reconcile_interval_s)
            self._poke.clear()
            if not self.election.active:
                continue
            try:
                await self.reconcile()
                now = asyncio.get_running_loop().time()
                if self.auto_leader_rebalance and now - last_rebalance >= self.rebalance_interval_s:
                    last_rebalance = now
                    await self.elect_preferred(None)
            except (FencedError, ConflictError) as exc:
                log.info("partition reconcile retried", extra={"error": str(exc)})
            except Exception:
                log.exception("partition reconcile failed")

    # -- requests ------------------------------------------------------------------------------------

    async def check_broker_epoch(self, broker: int, incarnation: str) -> None:
        """STALE_BROKER_EPOCH unless ``broker`` is registered in etcd right now with ``incarnation``."""
        got = await self.store.get(self.keys.broker(broker))
        check_broker_epoch(got[0] if got else None, broker, incarnation)

    async def alter_partition(self, broker: int, incarnation: str, tp: TopicPartition, leader_epoch: int,
                              partition_epoch: int, new_isr: list[int]) -> PartitionState:
        return await run_to_the_end(self._alter_partition(broker, incarnation, tp, leader_epoch, partition_epoch,
                                                          new_isr))

    async def _alter_partition(self, broker: int, incarnation: str, tp: TopicPartition, leader_epoch: int,
                               partition_epoch: int, new_isr: list[int]) -> PartitionState:
        async with self.lock:
            await self.check_broker_epoch(broker, incarnation)
            got = await self.store.get(self.keys.partition(tp.topic, tp.partition))
            topic = await self.store.get(self.keys.topic(tp.topic))
            if got is None or topic is None:
                raise TidelogError(f"{tp} does not exist", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            st, rev = PartitionState.from_json(got[0]), got[2]
            replicas = TopicRecord.from_json(topic[0]).assignment.get(tp.partition, [])
            # A crashed broker stays registered until its lease expires; the leader may still hold its
            # last fetch position and propose it back. Refused ports make it ineligible at once.
            new = alter_partition(st, replicas, broker, leader_epoch, partition_epoch, new_isr,
                                  await self.leader_eligible())
            await self._apply({tp: new}, {tp: rev}, f"AlterPartition from broker {broker}")
            if tp in self.reassigning:
                self.poke()  # the ISR may now hold every target replica: complete the reassignment
            return new

    async def alter_partitions(self, broker: int, incarnation: str,
                               items: list[AlterItem]) -> list[PartitionState | TidelogError]:
        """A batch of one leader's ISR proposals: one broker-epoch check, one read, a few transactions.
        Per item, in order, the new state or the error refusing it."""
        return await run_to_the_end(self._alter_partitions(broker, incarnation, items))

    async def _alter_partitions(self, broker: int, incarnation: str,
                                items: list[AlterItem]) -> list[PartitionState | TidelogError]:
        async with self.lock:
            await self.check_broker_epoch(broker, incarnation)
            topics, states = await self._read_states({tp for tp, _, _, _ in items})
            results = alter_partitions(topics, {tp: s for tp, (s, _) in states.items()}, broker, items,
                                       await self.leader_eligible())
            changes = {tp: r for (tp, _, _, _), r in zip(items, results) if isinstance(r, PartitionState)}
            not_written = await self._apply(changes, {tp: states[tp][1] for tp in changes},
                                            f"AlterPartition from broker {broker}", tolerate_conflicts=True)
            if not self.reassigning.isdisjoint(changes):
                self.poke()  # the ISR may now hold every target replica: complete the reassignment
            return [TidelogError(f"{tp} changed concurrently: retry with the current partition epoch",
                                 code=ErrorCode.INVALID_UPDATE_VERSION) if tp in not_written else r
                    for (tp, _, _, _), r in zip(items, results)]

    async def _read_states(self, tps: set[TopicPartition]) -> tuple[dict[str, TopicRecord],
                                                                     dict[TopicPartition, tuple[PartitionState, int]]]:
        """The topics and partition states (with mod revisions) a request names: key by key for a
        few, one read of everything for many."""
        if len(tps) > SMALL_READ:
            all_topics, all_states, _ = await self.load()
            return all_topics, all_states
        topics: dict[str, TopicRecord] = {}
        states: dict[TopicPartition, tuple[PartitionState, int]] = {}
        for name in {tp.topic for tp in tps}:
            got = await self.store.get(self.keys.topic(name))
            if got is not None:
                topics[name] = TopicRecord.from_json(got[0])
        for tp in tps:
            got = await self.store.get(self.keys.partition(tp.topic, tp.partition))
            if got is not None:
                states[tp] = (PartitionState.from_json(got[0]), got[2])
        return topics, states

    async def controlled_shutdown(self, broker: int, incarnation: str) -> int:
        async with self.lock:
            await self.check_broker_epoch(broker, incarnation)
            # From now until it restarts: no leadership, no ISR membership (eligible_brokers). Written to
            # etcd first, so that a controller taking over meanwhile knows it too.
            await self.election.write([self.store.op_put(self.keys.controlled_shutdown(broker),
                                                         {"incarnation": incarnation})])
            self.shutting_down[broker] = incarnation
            topics, states, live = await self.load()
            changes, stuck = on_controlled_shutdown(topics, {tp: s for tp, (s, _) in states.items()}, broker,
                                                    live - {broker})
            await self._apply(changes, {tp: r for tp, (_, r) in states.items()}, f"controlled shutdown of {broker}")
            return stuck

    async def elect_preferred(self, only: Iterable[TopicPartition] | None) -> dict[TopicPartition, PartitionState]:
        async with self.lock:
            topics, states, _live = await self.load()  # load() -> live_brokers() has just set _eligible
            changes = preferred_elections(topics, {tp: s for tp, (s, _) in states.items()}, self._eligible, only)
            await self._apply(changes, {tp: r for tp, (_, r) in states.items()}, "preferred leader election")
            return changes

    def describe_changes(self, changes: dict[TopicPartition, PartitionState]) -> list[dict[str, Any]]:
        return [{"topic": tp.topic, "partition": tp.partition, "leader": st.leader, "leader_epoch": st.leader_epoch}
                for tp, st in sorted(changes.items())]

    # -- reassignments (KIP-455; the rules are ``reassignment``'s) ---------------------------------------

    async def load_reassignments(self) -> dict[TopicPartition, tuple[ReassignmentRecord, int]]:
        snap = await self.store.get_prefix(self.keys.reassignments_prefix())
        prefix = self.keys.reassignments_prefix().decode()
        out: dict[TopicPartition, tuple[ReassignmentRecord, int]] = {}
        for key, (value, _, mod) in snap.items():
            topic, _, p = key.decode()[len(prefix):].rpartition("/")
            out[TopicPartition(topic, int(p))] = (ReassignmentRecord.from_json(value), mod)
        self.reassigning = set(out)
        return out

    async def alter_reassignments(self, requests: list[Request], attempts: int = 5) -> dict[TopicPartition, Step]:
        """Start, replace or cancel (target None) reassignments: all of them or, on any error, none. A
        partition state changed meanwhile (an ISR change of a busy partition) is read again and retried."""
        for attempt in range(attempts):
            try:
                return await self._alter_reassignments(requests)
            except ConflictError:
                if attempt == attempts - 1:
                    raise
                await asyncio.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    async def _alter_reassignments(self, requests: list[Request]) -> dict[TopicPartition, Step]:
        async with self.lock:
            topics, states, live = await self.load()
            ongoing = await self.load_reassignments()
            registered = {int(v["id"]) for v, _, _ in (await self.store.get_prefix(self.keys.brokers_prefix())).values()}
            steps = alter_reassignments(topics, {tp: s for tp, (s, _) in states.items()},
                                        {tp: r for tp, (r, _) in ongoing.items()}, requests, registered, live)
            await self._apply_steps(topics, steps, states, ongoing, "reassignment altered")
            return steps

    async def list_reassignments(self, only: set[TopicPartition] | None = None) -> list[dict[str, Any]]:
        ongoing = await self.load_reassignments()
        wanted = {tp: r for tp, (r, _) in ongoing.items() if only is None or tp in only}
        topics: dict[str, TopicRecord] = {}
        for name in {tp.topic for tp in wanted}:
            got = await self.store.get(self.keys.topic(name))
            if got is not None:
                topics[name] = TopicRecord.from_json(got[0])
        return describe(topics, wanted)

    async def _advance_reassignments(self) -> None:
        """Complete the reassignments whose target replicas are all in the ISR (called under the lock,
        on every reconcile: a newly active controller resumes what its predecessor started)."""
        ongoing = await self.load_reassignments()
        if not ongoing:
            return
        topics, states, live = await self.load()
        steps = advance_all(topics, {tp: s for tp, (s, _) in states.items()},
                            {tp: r for tp, (r, _) in ongoing.items()}, live)
        stale = [tp for tp in ongoing if tp.topic not in topics or tp not in states]
        if stale:  # the topic (or partition) was deleted under it
            await self.election.write([self.store.op_delete(self.keys.reassignment(tp.topic, tp.partition))
                                       for tp in stale[:100]])
        await self._apply_steps(topics, steps, states, ongoing, "reassignment completed")

    async def _apply_steps(self, topics: dict[str, TopicRecord], steps: dict[TopicPartition, Step],
                           states: dict[TopicPartition, tuple[PartitionState, int]],
                           ongoing: dict[TopicPartition, tuple[ReassignmentRecord, int]], why: str) -> None:
        """Write each step — the topic record's replica list, the partition state, the reassignment
        record — in transactions guarded by every revision read, a topic's partitions in chunks."""
        by_topic: dict[str, list[TopicPartition]] = {}
        for tp in sorted(steps):
            by_topic.setdefault(tp.topic, []).append(tp)
        for name, tps in by_topic.items():
            for chunk in chunked(tps, STEP_CHUNK):
                got = await self.store.get(self.keys.topic(name))
                if got is None:
                    raise ConflictError(f"topic {name!r} was deleted concurrently")
                topic, topic_rev = TopicRecord.from_json(got[0]), got[2]
                if any(topic.assignment.get(tp.partition) != topics[name].assignment.get(tp.partition) for tp in chunk):
                    raise ConflictError(f"topic {name!r} replicas changed concurrently")
                assignment = dict(topic.assignment)
                ops = []
                compares = [self.store.cmp_mod_revision(self.keys.topic(name), topic_rev)]
                for tp in chunk:
                    step = steps[tp]
                    assignment[tp.partition] = step.replicas
                    pkey, rkey = self.keys.partition(tp.topic, tp.partition), self.keys.reassignment(tp.topic, tp.partition)
                    ops.append(self.store.op_put(pkey, step.state.to_json()))
                    compares.append(self.store.cmp_mod_revision(pkey, states[tp][1]))
                    ops.append(self.store.op_put(rkey, step.reassignment.to_json()) if step.reassignment
                               else self.store.op_delete(rkey))
                    compares.append(self.store.cmp_mod_revision(rkey, ongoing[tp][1]) if tp in ongoing
                                    else self.store.cmp_absent(rkey))
                new = TopicRecord(topic.name, topic.topic_id, assignment, topic.configs)
                ops.append(self.store.op_put(self.keys.topic(name), new.to_json()))
                await self.election.write(ops, compares, "reassigned partitions changed concurrently")
                for tp in chunk:
                    step = steps[tp]
                    r = step.reassignment
                    log.info("partition reassignment", extra={
                        "tp": str(tp), "why": why, "replicas": str(step.replicas), "leader": step.state.leader,
                        "isr": str(step.state.isr), "adding": str(r.adding if r else []),
                        "removing": str(r.removing if r else [])})
                    if r is None:
                        self.reassigning.discard(tp)
                    else:
                        self.reassigning.add(tp)
