"""__transaction_state is created on request only, with Kafka's configs (no network: a fake topic
manager and store)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from services.controller.internal_topics import TransactionStateTopic, ensure_transaction_state_topic
from shared.metadata.keys import Keys
from shared.txn_topic import TRANSACTION_STATE_TOPIC


class FakeStore:
    def __init__(self) -> None:
        self.kv: dict[bytes, Any] = {}
        self.watchers: list[Callable[[dict[bytes, Any]], None]] = []

    def watch_prefix(self, prefix: bytes, on_change: Callable[[dict[bytes, Any]], None], name: str) -> asyncio.Task[None]:
        self.watchers.append(on_change)
        on_change({k: v for k, v in self.kv.items() if k.startswith(prefix)})
        return asyncio.ensure_future(asyncio.sleep(3600))

    async def get(self, key: bytes) -> Any:
        return self.kv.get(key)

    def put(self, key: bytes, value: Any) -> None:
        self.kv[key] = (value, 1, 1)
        for w in self.watchers:
            w({key: self.kv[key]})


class FakeTopics:
    def __init__(self, brokers: int) -> None:
        self.keys = Keys("c")
        self.store = FakeStore()
        self.brokers = brokers
        self.created: list[tuple[str, int, int, dict[str, Any]]] = []

    async def topic_names(self) -> list[str]:
        return [c[0] for c in self.created]

    async def live_brokers(self) -> list[int]:
        return list(range(self.brokers))

    async def create_internal(self, name: str, partitions: int, rf: int, configs: dict[str, Any]) -> None:
        self.created.append((name, partitions, rf, configs))


class Active:
    active = True


def test_created_once_requested_with_kafkas_configs() -> None:
    async def scenario(brokers: int) -> tuple[str, int, int, dict[str, Any]]:
        topics = FakeTopics(brokers)
        task = asyncio.ensure_future(ensure_transaction_state_topic(topics, Active(), TransactionStateTopic(),  # type: ignore[arg-type]
                                                                    wait_s=0.01, idle_s=0.05))
        await asyncio.sleep(0.2)
        assert topics.created == [] and not task.done()  # nobody asked
        topics.store.put(topics.keys.internal_topic_request(TRANSACTION_STATE_TOPIC), {"by": "test"})
        await asyncio.wait_for(task, 5)
        (created,) = topics.created
        return created

    assert asyncio.run(scenario(5)) == (TRANSACTION_STATE_TOPIC, 50, 3, {
        "cleanup.policy": "compact", "min.insync.replicas": 2, "segment.bytes": 104857600})
    assert asyncio.run(scenario(1))[2:] == (1, {"cleanup.policy": "compact", "min.insync.replicas": 1,
                                                "segment.bytes": 104857600})
