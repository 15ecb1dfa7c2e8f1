"""The coordinator's view of the cluster, kept current by etcd watches: live brokers, topics
(ids and partition counts, for assignors and regex subscriptions), the leaders of
``__consumer_offsets`` partitions, live coordinator instances and partition owners."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shared.metadata.keys import Keys
from shared.metadata.store import MetadataStore, Snapshot
from shared.metadata.types import PartitionState, TopicRecord
from shared.offsets_topic import OFFSETS_TOPIC


@dataclass
class CoordinatorView:
    brokers: dict[int, str] = field(default_factory=dict)  # id -> address
    topics: dict[str, tuple[str, int]] = field(default_factory=dict)  # name -> (topic id, partitions)
    leaders: dict[int, int] = field(default_factory=dict)  # __consumer_offsets partition -> leader broker
    instances: dict[str, str] = field(default_factory=dict)  # coordinator instance -> address
    owners: dict[int, dict[str, Any]] = field(default_factory=dict)  # partition -> ownership value (+ revision)

    @property
    def offsets_partitions(self) -> int:
        return self.topics.get(OFFSETS_TOPIC, ("", 0))[1]

    def leader_address(self, partition: int) -> str | None:
        leader = self.leaders.get(partition, -1)
        return self.brokers.get(leader)


class ViewWatcher:
    """Calls ``on_topics`` when topics change and ``on_membership`` when instances or owners change."""

    def __init__(self, store: MetadataStore, on_topics: Callable[[], None], on_membership: Callable[[], None]) -> None:
        self.store = store
        self.keys: Keys = store.keys
        self.view = CoordinatorView()
        self.on_topics = on_topics
        self.on_membership = on_membership
        self.ready = asyncio.Event()
        self._seen: set[str] = set()

    def start(self) -> None:
        k = self.keys
        self.store.watch_prefix(k.brokers_prefix(), self._brokers, "brokers")
        self.store.watch_prefix(k.topics_prefix(), self._topics, "topics")
        self.store.watch_prefix(k.partitions_prefix(OFFSETS_TOPIC), self._leaders, "offsets leaders")
        self.store.watch_prefix(k.services_prefix("coordinator"), self._instances, "coordinators")
        self.store.watch_prefix(k.offsets_owners_prefix(), self._owners, "offsets owners")

    async def reload(self) -> None:
        """Read every prefix again. A watch started on an empty prefix can miss the keys created
        just before it began (the store starts such a watch at "now"); this repairs the view."""
        k = self.keys
        self._brokers(await self.store.get_prefix(k.brokers_prefix()))
        self._topics(await self.store.get_prefix(k.topics_prefix()))
        self._leaders(await self.store.get_prefix(k.partitions_prefix(OFFSETS_TOPIC)))
        self._instances(await self.store.get_prefix(k.services_prefix("coordinator")))
        self._owners(await self.store.get_prefix(k.offsets_owners_prefix()))

    def _loaded(self, what: str) -> None:
        self._seen.add(what)
        if len(self._seen) == 5:
            self.ready.set()

    def _brokers(self, snap: Snapshot) -> None:
        self.view.brokers = {int(v["id"]): v["address"] for v, _, _ in snap.values()}
        self._loaded("brokers")

    def _topics(self, snap: Snapshot) -> None:
        topics = {t.name: (t.topic_id, len(t.assignment)) for t in (TopicRecord.from_json(v) for v, _, _ in snap.values())}
        changed = topics != self.view.topics
        self.view.topics = topics
        self._loaded("topics")
        if changed:
            self.on_topics()
            self.on_membership()  # the partition count of __consumer_offsets may have appeared

    def _leaders(self, snap: Snapshot) -> None:
        self.view.leaders = {int(Keys.last_segment(k)): PartitionState.from_json(v).leader for k, (v, _, _) in snap.items()}
        self._loaded("leaders")

    def _instances(self, snap: Snapshot) -> None:
        self.view.instances = {Keys.last_segment(k): v.get("address", "") for k, (v, _, _) in snap.items()}
        self._loaded("instances")
        self.on_membership()

    def _owners(self, snap: Snapshot) -> None:
        self.view.owners = {int(Keys.last_segment(k)): {**v, "create_revision": c} for k, (v, c, _) in snap.items()}
        self._loaded("owners")
        self.on_membership()
