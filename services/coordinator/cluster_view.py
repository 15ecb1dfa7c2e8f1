"""The coordinator's view of the cluster, kept current by etcd watches: live brokers, topics
(ids and partition counts, for assignors and regex subscriptions), the leaders of the partitions of
each internal topic it owns partitions of (``__consumer_offsets``, ``__transaction_state``), live
coordinator instances and the owners of those partitions, per topic."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.coordinator.assignors import partition_racks
from shared.metadata.keys import Keys
from shared.metadata.store import MetadataStore, Snapshot
from shared.metadata.types import PartitionState, TopicRecord
from shared.offsets_topic import OFFSETS_TOPIC
from shared.types import TopicPartition


@dataclass(frozen=True)
class WatchedTopic:
    """An internal topic whose leaders and partition owners the view follows."""
    topic: str
    owners_prefix: Callable[[Keys], bytes]


@dataclass
class CoordinatorView:
    brokers: dict[int, str] = field(default_factory=dict)  # id -> address
    topics: dict[str, tuple[str, int]] = field(default_factory=dict)  # name -> (topic id, partitions)
    #: internal topic -> partition -> leader broker
    topic_leaders: dict[str, dict[int, int]] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # coordinator instance -> address
    #: internal topic -> partition -> ownership value (+ create_revision)
    topic_owners: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    broker_racks: dict[int, str | None] = field(default_factory=dict)  # id -> broker.rack
    assignments: dict[str, dict[int, list[int]]] = field(default_factory=dict)  # topic -> partition -> replicas
    #: partition -> racks of its replicas, for the rack-aware group assignors (KIP-881)
    partition_racks: dict[TopicPartition, frozenset[str]] = field(default_factory=dict)

    @property
    def offsets_partitions(self) -> int:
        return self.partitions_of(OFFSETS_TOPIC)

    @property
    def owners(self) -> dict[int, dict[str, Any]]:
        """The owners of the ``__consumer_offsets`` partitions."""
        return self.owners_of(OFFSETS_TOPIC)

    @property
    def leaders(self) -> dict[int, int]:
        return self.topic_leaders.get(OFFSETS_TOPIC, {})

    def partitions_of(self, topic: str) -> int:
        return self.topics.get(topic, ("", 0))[1]

    def owners_of(self, topic: str) -> dict[int, dict[str, Any]]:
        return self.topic_owners.get(topic, {})

    def leader_address(self, partition: int, topic: str = OFFSETS_TOPIC) -> str | None:
        leader = self.topic_leaders.get(topic, {}).get(partition, -1)
        return self.brokers.get(leader)


class ViewWatcher:
    """Calls ``on_topics`` when topics change and ``on_membership`` when instances or owners change."""

    def __init__(self, store: MetadataStore, on_topics: Callable[[], None], on_membership: Callable[[], None],
                 watched: Sequence[WatchedTopic] = (WatchedTopic(OFFSETS_TOPIC, Keys.offsets_owners_prefix),)) -> None:
        self.store = store
        self.keys: Keys = store.keys
        self.view = CoordinatorView()
        self.on_topics = on_topics
        self.on_membership = on_membership
        self.watched = list(watched)
        self.ready = asyncio.Event()
        self._seen: set[str] = set()
        self._racks_seen: dict[int, str] = {}

    def start(self) -> None:
        k = self.keys
        self.store.watch_prefix(k.brokers_prefix(), self._brokers, "brokers")
        self.store.watch_prefix(k.topics_prefix(), self._topics, "topics")
        self.store.watch_prefix(k.services_prefix("coordinator"), self._instances, "coordinators")
        for w in self.watched:
            self.store.watch_prefix(k.partitions_prefix(w.topic), self._leaders_of(w.topic), f"{w.topic} leaders")
            self.store.watch_prefix(w.owners_prefix(k), self._owners_of(w.topic), f"{w.topic} owners")

    async def reload(self) -> None:
        """Read every prefix again. A watch started on an empty prefix can miss the keys created
        just before it began (the store starts such a watch at "now"); this repairs the view."""
        k = self.keys
        self._brokers(await self.store.get_prefix(k.brokers_prefix()))
        self._topics(await self.store.get_prefix(k.topics_prefix()))
        self._instances(await self.store.get_prefix(k.services_prefix("coordinator")))
        for w in self.watched:
            self._leaders_of(w.topic)(await self.store.get_prefix(k.partitions_prefix(w.topic)))
            self._owners_of(w.topic)(await self.store.get_prefix(w.owners_prefix(k)))

    def _loaded(self, what: str) -> None:
        self._seen.add(what)
        if len(self._seen) == 3 + 2 * len(self.watched):
            self.ready.set()

    def _brokers(self, snap: Snapshot) -> None:
        self.view.brokers = {int(v["id"]): v["address"] for v, _, _ in snap.values()}
        self.view.broker_racks = {int(v["id"]): v.get("rack") or None for v, _, _ in snap.values()}
        racks_changed = self._update_racks()
        self._loaded("brokers")
        if racks_changed and "topics" in self._seen:
            self.on_topics()

    def _update_racks(self) -> bool:
        """Recompute the partitions' replica racks; True if they changed. A broker that left keeps its
        rack here until it registers again (its replicas are still on that rack)."""
        known = {**self._racks_seen, **{b: r for b, r in self.view.broker_racks.items() if r}}
        self._racks_seen = known
        racks = partition_racks(self.view.assignments, known)
        changed = racks != self.view.partition_racks
        self.view.partition_racks = racks
        return changed

    def _topics(self, snap: Snapshot) -> None:
        records = [TopicRecord.from_json(v) for v, _, _ in snap.values()]
        topics = {t.name: (t.topic_id, len(t.assignment)) for t in records}
        changed = topics != self.view.topics
        self.view.topics = topics
        self.view.assignments = {t.name: t.assignment for t in records}
        changed = self._update_racks() or changed
        self._loaded("topics")
        if changed:
            self.on_topics()
            self.on_membership()  # the partition count of an internal topic may have appeared

    def _leaders_of(self, topic: str) -> Callable[[Snapshot], None]:
        def update(snap: Snapshot) -> None:
            self.view.topic_leaders[topic] = {int(Keys.last_segment(k)): PartitionState.from_json(v).leader
                                              for k, (v, _, _) in snap.items()}
            self._loaded(f"leaders {topic}")
        return update

    def _instances(self, snap: Snapshot) -> None:
        self.view.instances = {Keys.last_segment(k): v.get("address", "") for k, (v, _, _) in snap.items()}
        self._loaded("instances")
        self.on_membership()

    def _owners_of(self, topic: str) -> Callable[[Snapshot], None]:
        def update(snap: Snapshot) -> None:
            self.view.topic_owners[topic] = {int(Keys.last_segment(k)): {**v, "create_revision": c}
                                             for k, (v, c, _) in snap.items()}
            self._loaded(f"owners {topic}")
            self.on_membership()
        return update
