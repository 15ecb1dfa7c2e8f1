"""Which coordinator instance should own each ``__consumer_offsets`` partition. Pure.

Partition ``p`` belongs to the ``p % n``-th live instance in sorted order. An
instance claims the partitions that are its own and unowned, and releases those
it owns that now belong to another live instance (that one claims them once the
ownership key is gone). Ownership keys hang off the owner's lease, so a dead or
paused instance's partitions become unowned when its lease expires.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def desired_owner(partition: int, live: list[str]) -> str | None:
    return live[partition % len(live)] if live else None


def plan(partitions: int, live: Iterable[str], owners: Mapping[int, Mapping[str, Any]], me: str) -> tuple[list[int], list[int]]:
    """``(to claim, to release)`` for instance ``me``."""
    ids = sorted(set(live))
    mine = [p for p, o in owners.items() if str(o.get("owner")) == me]
    if me not in ids:
        return [], sorted(mine)
    claim = [p for p in range(partitions) if p not in owners and desired_owner(p, ids) == me]
    release = [p for p in mine if p >= partitions or desired_owner(p, ids) != me]
    return claim, sorted(release)
