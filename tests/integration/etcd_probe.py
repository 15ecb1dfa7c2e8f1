"""Direct etcd reads for tests (through the project's own store module)."""

from __future__ import annotations

import asyncio
from typing import Any

from shared.metadata.store import MetadataStore
from shared.settings import parse_endpoint


def read_heartbeat(etcd: str, cluster: str) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        store = MetadataStore(parse_endpoint(etcd), cluster)
        await store.connect()
        try:
            got = await store.get(store.keys.controller_heartbeat())
            assert got is not None
            return got[0]
        finally:
            await store.close()

    return asyncio.run(go())


def set_topic_configs(etcd: str, cluster: str, topic: str, configs: dict[str, Any]) -> None:
    """Write config overrides straight into a topic's record, past the controller's checks (as a topic
    created by an older version could hold them); brokers pick the change up from their etcd watch."""
    from shared.metadata.store import compare_and_swap
    from shared.metadata.types import TopicRecord

    async def go() -> None:
        store = MetadataStore(parse_endpoint(etcd), cluster)
        await store.connect()
        try:
            key = store.keys.topic(topic)
            for _ in range(10):
                got = await store.get(key)
                assert got is not None, f"topic {topic} does not exist"
                rec = TopicRecord.from_json(got[0])
                rec.configs.update(configs)
                if await compare_and_swap(store, key, got[2], rec.to_json()):
                    return
            raise AssertionError(f"could not update {topic}'s configs")
        finally:
            await store.close()

    asyncio.run(go())


def offsets_owner_count(etcd: str, cluster: str) -> int:
    """How many ``__consumer_offsets`` partitions a coordinator owns right now."""

    async def go() -> int:
        store = MetadataStore(parse_endpoint(etcd), cluster)
        await store.connect()
        try:
            return len(await store.get_prefix(store.keys.offsets_owners_prefix()))
        finally:
            await store.close()

    return asyncio.run(go())
