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
