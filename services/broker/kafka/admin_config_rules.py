"""Topic and broker configs as Kafka's DescribeConfigs / AlterConfigs / IncrementalAlterConfigs show and
change them: pure functions over ``shared.config.TOPIC_CONFIGS`` (no I/O, no asyncio).

- ``topic_config_entries``: every Tidelog topic config (all carry Kafka's names) with its value, source
  (``DYNAMIC_TOPIC_CONFIG`` for an override, ``DEFAULT_CONFIG`` otherwise), Kafka's config type, and on
  request its synonyms (the override, then the broker config it defaults to, as Kafka lists them)
  and documentation;
- ``broker_config_entries``: the broker configs a broker has, all static (read-only), ``STATIC_BROKER_CONFIG``
  when set to something else than Kafka's default;
- ``replaced_overrides`` (AlterConfigs: the given set replaces every override) and
  ``incremental_overrides`` (IncrementalAlterConfigs: SET / DELETE, APPEND / SUBTRACT on list configs);
- ``checked_changes``: validates the new overrides as the controller will (``INVALID_CONFIG``) and
  gives the REST changes (value, or None to remove) from the old overrides to the new.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from services.broker.kafka.admin_common import ItemError, duplicates
from shared.config import TOPIC_CONFIGS, check_min_insync_replicas, validate_topic_configs
from shared.errors import ErrorCode, InvalidConfigError

# DescribeConfigsResponse's ConfigSource values.
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
# DescribeConfigsResponse's ConfigType values.
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
# IncrementalAlterConfigs' config_operation values.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

#: Kafka's type of each topic config Tidelog has.
TOPIC_CONFIG_TYPES: dict[str, int] = {
    "cleanup.policy": LIST, "compression.type": STRING, "delete.retention.ms": LONG,
    "file.delete.delay.ms": LONG, "flush.messages": LONG, "flush.ms": LONG, "index.interval.bytes": INT,
    "max.compaction.lag.ms": LONG, "max.message.bytes": INT, "message.timestamp.type": STRING,
    "min.cleanable.dirty.ratio": DOUBLE, "min.compaction.lag.ms": LONG, "min.insync.replicas": INT,
    "retention.bytes": LONG, "retention.ms": LONG, "segment.bytes": INT, "segment.index.bytes": INT,
    "segment.ms": LONG, "unclean.leader.election.enable": BOOLEAN,
    "leader.replication.throttled.replicas": LIST, "follower.replication.throttled.replicas": LIST,
}

#: The broker config each topic config defaults to (Kafka's topic config synonyms).
BROKER_SYNONYMS: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy", "compression.type": "compression.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms", "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages", "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes", "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "max.message.bytes": "message.max.bytes", "message.timestamp.type": "log.message.timestamp.type",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms", "min.insync.replicas": "min.insync.replicas",
    "retention.bytes": "log.retention.bytes", "retention.ms": "log.retention.ms", "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes", "segment.ms": "log.roll.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}


def config_string(value: Any) -> str | None:
    """A config value as Kafka writes it: ``true``/``false``, numbers in decimal, lists comma-separated."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _shown(name: str, raw: Any) -> str | None:
    """An override as stored, in the form its config parses to (``compact, delete`` -> ``compact,delete``)."""
    try:
        return config_string(validate_topic_configs({name: raw})[name])
    except InvalidConfigError:
        return config_string(raw)  # stored before a rule tightened: shown as it is


def _wanted(name: str, keys: Iterable[str] | None) -> bool:
    return keys is None or name in keys


def topic_config_entries(overrides: Mapping[str, Any], keys: Iterable[str] | None = None, *,
                         synonyms: bool = False, documentation: bool = False) -> list[dict[str, Any]]:
    """DescribeConfigs' entries for a topic with these overrides (``keys``: only those names)."""
    wanted = None if keys is None else set(keys)
    out = []
    for name, d in sorted(TOPIC_CONFIGS.items()):
        if not _wanted(name, wanted):
            continue
        default = config_string(d.default)
        overridden = name in overrides
        value = _shown(name, overrides[name]) if overridden else default
        syn = [{"name": name, "value": value, "source": DYNAMIC_TOPIC_CONFIG}] if overridden else []
        syn.append({"name": BROKER_SYNONYMS.get(name, name), "value": default, "source": DEFAULT_CONFIG})
        out.append({"name": name, "value": value, "read_only": False,
                    "config_source": DYNAMIC_TOPIC_CONFIG if overridden else DEFAULT_CONFIG,
                    "is_sensitive": False, "synonyms": syn if synonyms else [],
                    "config_type": TOPIC_CONFIG_TYPES.get(name, STRING),
                    "documentation": d.doc if documentation else None})
    return out


def created_topic_configs(overrides: Mapping[str, Any]) -> list[dict[str, Any]]:
    """CreateTopics v5+'s ``configs`` of a new topic: every config with its value and source."""
    return [{k: e[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
            for e in topic_config_entries(overrides)]


@dataclass(frozen=True)
class BrokerConfig:
    """One config a broker has: its value, Kafka's default (None: none), Kafka's type, what it does."""

    name: str
    value: Any
    kafka_default: Any
    config_type: int
    doc: str


def broker_config_entries(configs: Iterable[BrokerConfig], keys: Iterable[str] | None = None, *,
                          synonyms: bool = False, documentation: bool = False) -> list[dict[str, Any]]:
    """DescribeConfigs' entries for a broker: all read-only (Tidelog changes no broker config at run time)."""
    wanted = None if keys is None else set(keys)
    out = []
    for c in sorted(configs, key=lambda c: c.name):
        if not _wanted(c.name, wanted):
            continue
        value = config_string(c.value)
        source = DEFAULT_CONFIG if value == config_string(c.kafka_default) else STATIC_BROKER_CONFIG
        out.append({"name": c.name, "value": value, "read_only": True, "config_source": source,
                    "is_sensitive": False,
                    "synonyms": [{"name": c.name, "value": value, "source": source}] if synonyms else [],
                    "config_type": c.config_type, "documentation": c.doc if documentation else None})
    return out


def topic_default_broker_configs() -> list[BrokerConfig]:
    """The broker-level defaults of the topic configs (``log.retention.ms``, ...), as Tidelog has them."""
    return [BrokerConfig(BROKER_SYNONYMS[name], d.default, d.default, TOPIC_CONFIG_TYPES.get(name, STRING),
                         f"default of the topic config {name}: {d.doc}")
            for name, d in sorted(TOPIC_CONFIGS.items()) if name in BROKER_SYNONYMS]  # throttled replicas: none


# -- altering ----------------------------------------------------------------------------------------


def _list_items(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def replaced_overrides(configs: Iterable[tuple[str, str | None]]) -> dict[str, str]:
    """AlterConfigs: the given configs become the topic's overrides, every other override goes."""
    given = list(configs)
    if dup := duplicates([n for n, _ in given]):
        raise ItemError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {sorted(dup)}")
    for name, value in given:
        if value is None:
            raise ItemError(ErrorCode.INVALID_REQUEST, f"Null value not supported for topic config: {name}")
    return {n: v for n, v in given if v is not None}


def incremental_overrides(current: Mapping[str, Any], ops: Iterable[tuple[str, int, str | None]]) -> dict[str, Any]:
    """IncrementalAlterConfigs: the overrides after SET / DELETE / APPEND / SUBTRACT (APPEND and SUBTRACT
    only on list configs, from the current value, the override or else the default)."""
    given = list(ops)
    if dup := duplicates([n for n, _, _ in given]):
        raise ItemError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {sorted(dup)}")
    new = dict(current)
    for name, op, value in given:
        d = TOPIC_CONFIGS.get(name)
        if d is None:
            raise ItemError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if op == DELETE:
            new.pop(name, None)
            continue
        if op not in (SET, APPEND, SUBTRACT):
            raise ItemError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op} for {name}")
        if value is None:
            raise ItemError(ErrorCode.INVALID_REQUEST, f"Null value not supported for: {name}")
        if op == SET:
            new[name] = value
            continue
        verb = "append" if op == APPEND else "subtract"
        if TOPIC_CONFIG_TYPES.get(name) != LIST:
            raise ItemError(ErrorCode.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {name}")
        items = _list_items(config_string(new.get(name, d.default)) or "")
        change = _list_items(value)
        if op == APPEND:
            items += [i for i in change if i not in items]
        else:
            items = [i for i in items if i not in change]
        new[name] = ",".join(items)
    return new


def checked_changes(old: Mapping[str, Any], new: Mapping[str, Any], replication_factor: int) -> dict[str, str | None]:
    """Check ``new`` overrides as the controller does (``INVALID_CONFIG``: unknown name, bad value,
    ``min.insync.replicas`` above the replication factor); the changes that turn ``old`` into ``new``:
    each set or changed config with its value, each removed one with None."""
    try:
        parsed = validate_topic_configs(new)
        check_min_insync_replicas(parsed, replication_factor)
    except InvalidConfigError as exc:
        raise ItemError(ErrorCode.INVALID_CONFIG, exc.args[0]) from None
    changes: dict[str, str | None] = {name: None for name in old if name not in new}
    for name, value in parsed.items():
        if name not in old or _shown(name, old[name]) != config_string(value):
            changes[name] = config_string(value)
    return changes
