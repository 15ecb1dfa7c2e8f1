"""Topic management decisions of the active controller.

Each operation validates, computes the new records, and applies them in one
etcd transaction fenced by the controller epoch (``ControllerElection.write``)
and guarded by the revision of what it read, so concurrent changes cannot be
lost silently.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

from services.controller.assignment import InvalidPartitionsError, assign_replicas
from services.controller.election import ControllerElection
from shared.config import TOPIC_CONFIGS, check_min_insync_replicas, effective_configs, validate_topic_configs
from shared.errors import (
    InvalidConfigError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from shared.metadata.keys import Keys
from shared.metadata.store import MetadataStore
from shared.metadata.txn_limits import split_writes
from shared.metadata.types import PartitionState, TopicRecord
from shared.topic_names import INTERNAL_TOPICS, find_collision, validate_topic_name

MAX_PARTITIONS = 10_000


class TopicManager:
    def __init__(self, store: MetadataStore, election: ControllerElection, rng: random.Random | None = None) -> None:
        self.store = store
        self.keys: Keys = store.keys
        self.election = election
        self.rng = rng or random.Random()
        # Multi-transaction writes (create, add partitions) of this controller, one at a time.
        self._write_lock = asyncio.Lock()

    # -- reads -----------------------------------------------------------------------------

    async def live_brokers(self) -> dict[int, str | None]:
        snap = await self.store.get_prefix(self.keys.brokers_prefix())
        return {int(v["id"]): v.get("rack") for v, _, _ in snap.values()}

    async def topic_names(self) -> list[str]:
        snap = await self.store.get_prefix(self.keys.topics_prefix())
        return sorted(Keys.last_segment(k) for k in snap)

    async def get_topic(self, name: str) -> tuple[TopicRecord, int]:
        got = await self.store.get(self.keys.topic(name))
        if got is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return TopicRecord.from_json(got[0]), got[2]

    async def describe(self, name: str) -> dict[str, Any]:
        topic, _ = await self.get_topic(name)
        states = await self.store.get_prefix(self.keys.partitions_prefix(name))
        by_p = {int(Keys.last_segment(k)): PartitionState.from_json(v) for k, (v, _, _) in states.items()}
        partitions = []
        for p, replicas in sorted(topic.assignment.items()):
            st = by_p.get(p)
            partitions.append(
                {
                    "partition": p,
                    "leader": st.leader if st else -1,
                    "leader_epoch": st.leader_epoch if st else -1,
                    "replicas": replicas,
                    "isr": st.isr if st else [],
                    "partition_epoch": st.partition_epoch if st else -1,
                }
            )
        return {
            "name": topic.name,
            "topic_id": topic.topic_id,
            "partitions": partitions,
            "replication_factor": len(topic.assignment[0]) if topic.assignment else 0,
            "configs": effective_configs(topic.configs),
            "config_overrides": topic.configs,
        }

    # -- writes ----------------------------------------------------------------------------

    async def create(self, name: str, partitions: int, replication_factor: int, configs: dict[str, Any]) -> dict[str, Any]:
        validate_topic_name(name)
        if name in INTERNAL_TOPICS:
            raise InvalidTopicError(f"{name} is an internal topic managed by Tidelog")
        return await self.create_internal(name, partitions, replication_factor, configs)

    async def create_internal(self, name: str, partitions: int, replication_factor: int,
                              configs: dict[str, Any]) -> dict[str, Any]:
        """``create`` without the internal-name check (the controller's own topics)."""
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(f"partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}")
        parsed = validate_topic_configs(configs)
        check_min_insync_replicas(parsed, replication_factor)
        existing = await self.topic_names()
        if name in existing:
            raise TopicExistsError(f"topic {name!r} already exists")
        clash = find_collision(name, existing)
        if clash:
            raise InvalidTopicError(f"topic {name!r} collides with existing topic {clash!r} ('.' and '_' are equivalent)")
        brokers = await self.live_brokers()
        assignment = assign_replicas(brokers, partitions, replication_factor, rng=self.rng)
        record = TopicRecord(name, uuid.uuid4().hex, assignment, {k: str(v).lower() if isinstance(v, bool) else v for k, v in parsed.items()})
        absent = [self.store.cmp_absent(self.keys.topic(name))]
        conflict = f"topic {name!r} was created concurrently"
        async with self._write_lock:
            # Leftovers of a create that failed half-way (partition states without a topic record).
            await self._write([self.store.op_delete(self.keys.partitions_prefix(name), prefix=True),
                               self.store.op_delete(self.keys.reassignments_prefix(name), prefix=True)], absent, conflict)
            await self._write_partition_states(name, assignment, absent, conflict)
            await self._write([self.store.op_put(self.keys.topic(name), record.to_json())], absent, conflict)
        return await self.describe(name)

    async def _write_partition_states(self, name: str, assignment: dict[int, list[int]], compares: list[Any],
                                      conflict: str) -> None:
        """Initial states of new partitions, in as many transactions as etcd's limits need. They are
        invisible until the topic record that lists them is written (the single commit point)."""
        states = ((self.keys.partition(name, p), PartitionState(r[0], 0, list(r)).to_json()) for p, r in assignment.items())
        for chunk in split_writes(states):
            await self._write([self.store.op_put(k, v) for k, v in chunk], compares, conflict)

    async def delete(self, name: str) -> None:
        _, rev = await self.get_topic(name)
        ops = [
            self.store.op_delete(self.keys.topic(name)),
            self.store.op_delete(self.keys.partitions_prefix(name), prefix=True),
            self.store.op_delete(self.keys.reassignments_prefix(name), prefix=True),
        ]
        await self._write(ops, [self.store.cmp_mod_revision(self.keys.topic(name), rev)], f"topic {name!r} changed concurrently")

    async def alter_configs(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        topic, rev = await self.get_topic(name)
        to_set = {k: v for k, v in changes.items() if v is not None}
        parsed = validate_topic_configs(to_set)
        for k, v in changes.items():
            if v is None and k not in TOPIC_CONFIGS:
                raise InvalidConfigError(f"unknown topic config {k!r}")
        configs = {k: v for k, v in topic.configs.items() if changes.get(k, "keep") is not None}
        configs.update({k: str(v).lower() if isinstance(v, bool) else v for k, v in parsed.items()})
        check_min_insync_replicas(validate_topic_configs(configs), len(topic.assignment[0]))
        new = TopicRecord(topic.name, topic.topic_id, topic.assignment, configs)
        await self._write(
            [self.store.op_put(self.keys.topic(name), new.to_json())],
            [self.store.cmp_mod_revision(self.keys.topic(name), rev)],
            f"topic {name!r} changed concurrently",
        )
        return await self.describe(name)

    async def add_partitions(self, name: str, total: int) -> dict[str, Any]:
        topic, rev = await self.get_topic(name)
        current = len(topic.assignment)
        if total <= current:
            raise InvalidPartitionsError(f"topic {name!r} has {current} partitions; the new count must be larger, got {total}")
        if total > MAX_PARTITIONS:
            raise InvalidPartitionsError(f"at most {MAX_PARTITIONS} partitions")
        rf = len(topic.assignment[0])
        brokers = await self.live_brokers()
        extra = assign_replicas(brokers, total - current, rf, first_partition=current, rng=self.rng)
        new = TopicRecord(topic.name, topic.topic_id, {**topic.assignment, **extra}, topic.configs)
        unchanged = [self.store.cmp_mod_revision(self.keys.topic(name), rev)]
        conflict = f"topic {name!r} changed concurrently"
        async with self._write_lock:
            await self._write_partition_states(name, extra, unchanged, conflict)
            await self._write([self.store.op_put(self.keys.topic(name), new.to_json())], unchanged, conflict)
        return await self.describe(name)

    async def _write(self, ops: list[Any], compares: list[Any], conflict: str) -> None:
        await self.election.write(ops, compares, conflict)
