"""The controller's Prometheus metrics (Kafka's KafkaController and ControllerStats).

``ControllerObserver`` is told what the partition controller loaded and applied (``loaded``,
``applied``) and how each fenced etcd transaction went (``txn``); partition counts and the active
flag are read at scrape time. Leader elections are classified against the states loaded just before
under the same lock: ``preferred``, ``controlled_shutdown``, ``unclean`` (the new leader was not in
the ISR), else ``clean``. The balancer loop (``balancer_loop.py``) counts its moves (``balancer_moves``) and
sets ``reassigning`` and ``balancer_paused``, read at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from shared.metrics import LATENCY_BUCKETS

ELECTION_TYPES = ("clean", "unclean", "preferred", "controlled_shutdown")


def election_type(why: str, before: Any, after: Any) -> str | None:
    """The kind of leader election a state change is, or None when the leader did not change
    to a live one (ISR-only changes, a partition going offline)."""
    if after.leader == -1 or (before is not None and before.leader == after.leader):
        return None
    if why.startswith("preferred"):
        return "preferred"
    if why.startswith("controlled shutdown"):
        return "controlled_shutdown"
    if before is not None and after.leader not in before.isr:
        return "unclean"
    return "clean"


class ControllerObserver(Collector):
    def __init__(self, active: Callable[[], int], registry: CollectorRegistry = REGISTRY) -> None:
        self.active = active  # the controller epoch, 0 while standby
        self.states: dict[Any, Any] = {}
        self.elections = Counter("tidelog_controller_leader_elections", "Leader elections by type "
                                 "(Kafka's LeaderElectionRateAndTimeMs, UncleanLeaderElectionsPerSec)", ["type"],
                                 registry=registry)
        self._election = {t: self.elections.labels(t) for t in ELECTION_TYPES}
        self.election_time = Histogram("tidelog_controller_leader_election_time_seconds",
                                       "Time to write a round of leader elections to etcd", buckets=LATENCY_BUCKETS,
                                       registry=registry)
        self.txn_time = Histogram("tidelog_controller_etcd_txn_time_seconds", "Fenced etcd transaction latency",
                                  buckets=LATENCY_BUCKETS, registry=registry)
        self.balancer_moves_total = Counter("tidelog_controller_balancer_moves", "The balancer's partition moves "
                                            "(reassignments) by event (started, completed) and goal",
                                            ["event", "goal"], registry=registry)
        #: read at scrape time; the balancer loop sets them (partitions being reassigned, paused 0/1)
        self.reassigning: Callable[[], int] = lambda: 0
        self.balancer_paused: Callable[[], int] = lambda: 0
        self.txn_failures = Counter("tidelog_controller_etcd_txn_failures", "Fenced etcd transactions refused "
                                    "or failed", registry=registry)
        registry.register(self)

    def loaded(self, states: dict[Any, tuple[Any, int]]) -> None:
        self.states = {tp: st for tp, (st, _) in states.items()}

    def applied(self, changes: dict[Any, Any], why: str, seconds: float) -> None:
        elected = 0
        for tp, st in changes.items():
            kind = election_type(why, self.states.get(tp), st)
            if kind is not None:
                self._election[kind].inc()
                elected += 1
            self.states[tp] = st
        if elected:
            self.election_time.observe(seconds)

    def balancer_moves(self, event: str, goal: str) -> None:
        self.balancer_moves_total.labels(event, goal).inc()

    def txn(self, seconds: float, ok: bool) -> None:
        self.txn_time.observe(seconds)
        if not ok:
            self.txn_failures.inc()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        epoch = self.active()
        states = list(self.states.values()) if epoch else []
        yield GaugeMetricFamily("tidelog_controller_active_controller_count", "1 on the active controller",
                                value=1 if epoch else 0)
        yield GaugeMetricFamily("tidelog_controller_epoch", "The active controller's epoch (0 while standby)",
                                value=epoch)
        yield GaugeMetricFamily("tidelog_controller_global_partition_count", "Partitions (active controller only)",
                                value=len(states))
        yield GaugeMetricFamily("tidelog_controller_offline_partitions_count", "Partitions without a leader "
                                "(active controller only)", value=sum(1 for s in states if s.leader == -1))
        yield GaugeMetricFamily("tidelog_controller_reassigning_partitions", "Partitions being reassigned "
                                "(Kafka's ReassigningPartitions; active controller only)",
                                value=self.reassigning() if epoch else 0)
        yield GaugeMetricFamily("tidelog_controller_balancer_paused", "1 while the balancer is paused "
                                "(active controller only)", value=self.balancer_paused() if epoch else 0)


_default: ControllerObserver | None = None


def controller_observer(active: Callable[[], int]) -> ControllerObserver:
    """The process's observer in the default registry (created once: a registry refuses duplicates)."""
    global _default
    if _default is None:
        _default = ControllerObserver(active)
    else:
        _default.active = active
    return _default
