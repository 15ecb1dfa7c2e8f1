"""Client quota entries in etcd: describe with a filter, alter (set/remove keys, validate-only), and
the effective quota of a (user, client-id) with the precedence level that gave it.

Entries live under ``quotas/<entity path>`` (``shared.metadata.keys``); a write
is a compare-and-swap on the entry, retried on a concurrent change. Any
controller may serve these: etcd orders the writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.metadata.store import MetadataStore, compare_and_swap
from shared.quota.entities import (
    DEFAULT,
    KEY_OF_TYPE,
    QuotaConfigError,
    QuotaEntity,
    apply_ops,
    resolve,
    validate_value,
)

LEVEL_NAMES = {1: "user + client-id", 2: "user + <default> client-id", 3: "user",
               4: "<default> user + client-id", 5: "<default> user + <default> client-id", 6: "<default> user",
               7: "client-id", 8: "<default> client-id"}


@dataclass(frozen=True)
class EntityFilter:
    """Kafka's DescribeClientQuotas filter: per component a name, DEFAULT, or None (any); ``strict``
    leaves out entities with components the filter does not name."""

    user: str | None = None
    client_id: str | None = None
    strict: bool = False

    def matches(self, e: QuotaEntity) -> bool:
        for want, have in ((self.user, e.user), (self.client_id, e.client_id)):
            if want is not None and have != want:
                return False
            if self.strict and want is None and have is not None:
                return False
        return True


class QuotaConfigs:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def entries(self) -> dict[QuotaEntity, tuple[dict[str, float], int]]:
        prefix = self.store.keys.quotas_prefix()
        out = {}
        for key, (value, _, mod) in (await self.store.get_prefix(prefix)).items():
            try:
                entity = QuotaEntity.from_path(key[len(prefix):].decode())
                out[entity] = ({k: validate_value(k, v) for k, v in dict(value).items()}, mod)
            except (QuotaConfigError, TypeError, ValueError):
                continue  # the quota service logs bad entries
        return out

    async def describe(self, flt: EntityFilter) -> list[dict[str, Any]]:
        found = await self.entries()
        return [{"entity": e.as_dict(), "values": values}
                for e, (values, _) in sorted(found.items(), key=lambda kv: kv[0].path()) if flt.matches(e)]

    async def alter(self, changes: Sequence[tuple[QuotaEntity, Sequence[tuple[str, float | None]]]],
                    validate_only: bool) -> list[dict[str, Any]]:
        """Apply every entity's ops (all validated first: one bad op fails the whole request)."""
        for entity, ops in changes:
            try:
                apply_ops({}, [(k, v) for k, v in ops])
            except QuotaConfigError as exc:
                raise QuotaConfigError(f"{entity}: {exc.args[0]}") from None
        results = []
        for entity, ops in changes:
            values = await self._alter_one(entity, ops, validate_only)
            results.append({"entity": entity.as_dict(), "values": values})
        return results

    async def _alter_one(self, entity: QuotaEntity, ops: Sequence[tuple[str, float | None]],
                         validate_only: bool) -> dict[str, float]:
        key = self.store.keys.quota(entity.path())
        for _ in range(20):
            found = await self.store.get(key)
            current, mod = (dict(found[0]), found[2]) if found else ({}, None)
            new = apply_ops(current, ops)
            if validate_only or new == current:
                return new
            if await compare_and_swap(self.store, key, mod, new or None):
                return new
        raise QuotaConfigError(f"{entity}: too many concurrent changes, retry")

    async def effective(self, user: str, client_id: str) -> dict[str, Any]:
        configs: Mapping[QuotaEntity, Mapping[str, float]] = {e: v for e, (v, _) in (await self.entries()).items()}
        quotas: dict[str, Any] = {}
        for key in KEY_OF_TYPE.values():
            m = resolve(configs, user, client_id, key)
            quotas[key] = None if m is None else {
                "value": m.value, "entity": m.entity.as_dict(), "level": m.level, "level_name": LEVEL_NAMES[m.level],
                "shared_by": {"user": m.group[0] or None, "client-id": m.group[1] or None},
                "cluster_wide": m.cluster_wide,
            }
        return {"user": user, "client_id": client_id, "quotas": quotas}


def parse_component(value: str | None) -> str | None:
    """A query parameter naming an entity component: ``<default>`` is the default entity."""
    return None if value is None else (DEFAULT if value == DEFAULT else value)
