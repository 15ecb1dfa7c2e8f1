"""The broker's view of cluster metadata, kept current by etcd watches.

Holds live brokers, topics (assignment, configs), partition states and the
active controller. ``on_change`` is called after every update so the replica
manager can reconcile local partitions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from shared.metadata.keys import Keys
from shared.metadata.store import MetadataStore, Snapshot
from shared.metadata.types import PartitionState, TopicRecord
from shared.types import TopicPartition

log = logging.getLogger(__name__)


@dataclass
class ClusterView:
    brokers: dict[int, dict[str, Any]] = field(default_factory=dict)
    topics: dict[str, TopicRecord] = field(default_factory=dict)
    partitions: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    controller: dict[str, Any] | None = None
    controller_epoch: int = 0
    cluster_id: str = ""

    def replicas(self, tp: TopicPartition) -> list[int]:
        t = self.topics.get(tp.topic)
        return t.assignment.get(tp.partition, []) if t else []


class MetadataCache:
    def __init__(self, store: MetadataStore, on_change: Callable[[ClusterView], Awaitable[None]] | None = None) -> None:
        self.store = store
        self.keys: Keys = store.keys
        self.view = ClusterView()
        self.on_change = on_change
        self._loaded = {"brokers": False, "topics": False, "partitions": False, "controller": False}
        self.ready = asyncio.Event()
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        cid = await self.store.get(self.keys.cluster_id())
        self.view.cluster_id = cid[0] if cid else ""
        self.store.watch_prefix(self.keys.brokers_prefix(), self._on_brokers, "brokers")
        self.store.watch_prefix(self.keys.topics_prefix(), self._on_topics, "topics")
        self.store.watch_prefix(self.keys.partitions_prefix(), self._on_partitions, "partitions")
        self.store.watch_prefix(self.keys.controller(), self._on_controller, "controller")

    def refresh_soon(self) -> None:
        """Re-read everything (after a lease loss the watches may have missed events)."""

        async def reload() -> None:
            self._on_brokers_snapshot = await self.store.get_prefix(self.keys.brokers_prefix())
            await self._on_brokers(self._on_brokers_snapshot)
            await self._on_topics(await self.store.get_prefix(self.keys.topics_prefix()))
            await self._on_partitions(await self.store.get_prefix(self.keys.partitions_prefix()))
            await self._on_controller(await self.store.get_prefix(self.keys.controller()))

        self.store.spawn(reload(), "metadata reload")

    async def _changed(self, what: str) -> None:
        self._loaded[what] = True
        if all(self._loaded.values()):
            self.ready.set()
            if self.on_change is not None:
                async with self._lock:
                    await self.on_change(self.view)

    async def _on_brokers(self, snap: Snapshot) -> None:
        self.view.brokers = {int(v["id"]): v for v, _, _ in snap.values()}
        await self._changed("brokers")

    async def _on_topics(self, snap: Snapshot) -> None:
        self.view.topics = {t.name: t for t in (TopicRecord.from_json(v) for v, _, _ in snap.values())}
        await self._changed("topics")

    async def _on_partitions(self, snap: Snapshot) -> None:
        prefix = self.keys.partitions_prefix().decode()
        parts: dict[TopicPartition, PartitionState] = {}
        for key, (value, _, _) in snap.items():
            topic, _, p = key.decode()[len(prefix) :].rpartition("/")
            parts[TopicPartition(topic, int(p))] = PartitionState.from_json(value)
        self.view.partitions = parts
        await self._changed("partitions")

    async def _on_controller(self, snap: Snapshot) -> None:
        own = snap.get(self.keys.controller())
        self.view.controller = own[0] if own else None
        self.view.controller_epoch = own[1] if own else 0
        if not self.view.cluster_id:
            cid = await self.store.get(self.keys.cluster_id())
            self.view.cluster_id = cid[0] if cid else ""
        await self._changed("controller")
