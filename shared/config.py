"""Topic-level configs: Kafka's names, defaults, types and meanings, in one place.

``TOPIC_CONFIGS`` is the single definition every service and the REST API
validate against. ``LogConfig`` is the typed view the broker's log uses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.errors import InvalidConfigError

LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class ConfigDef:
    name: str
    default: Any
    parse: Callable[[str], Any]
    doc: str
    check: Callable[[Any], bool] = lambda v: True
    expect: str = ""


def _int(s: str) -> int:
    try:
        v = int(str(s).strip())
    except ValueError:
        raise ValueError("expected an integer") from None
    if not -(2**63) <= v <= LONG_MAX:
        raise ValueError("out of the int64 range")
    return v


def _float(s: str) -> float:
    try:
        return float(str(s).strip())
    except ValueError:
        raise ValueError("expected a number") from None


def _bool(s: str) -> bool:
    v = str(s).strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise ValueError("expected true or false")


def _policy(s: str) -> str:
    parts = sorted({p.strip() for p in str(s).split(",") if p.strip()})
    if not parts or any(p not in ("compact", "delete") for p in parts):
        raise ValueError("expected delete, compact or compact,delete")
    return ",".join(parts)


def _ts_type(s: str) -> str:
    if s not in ("CreateTime", "LogAppendTime"):
        raise ValueError("expected CreateTime or LogAppendTime")
    return s


def _compression(s: str) -> str:
    v = str(s).strip().lower()
    if v not in ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd"):
        raise ValueError("expected producer, uncompressed (or none), gzip, snappy, lz4 or zstd")
    return v


def _throttled_replicas(s: str) -> str:
    """Kafka's throttled-replicas list: ``*`` or ``partition:broker,partition:broker`` ("" for none)."""
    text = ",".join(e.strip() for e in str(s).strip().split(",") if e.strip())
    if text != "*" and not all(_REPLICA_ENTRY.fullmatch(e) for e in text.split(",") if e):
        raise ValueError("expected * or partition:broker,partition:broker")
    return text


_REPLICA_ENTRY = re.compile(r"\d+:\d+")


def _nonneg(v: Any) -> bool:
    return v >= 0


def _pos(v: Any) -> bool:
    return v > 0


def _ge_minus1(v: Any) -> bool:
    return v >= -1


_DEFS = [
    ConfigDef("cleanup.policy", "delete", _policy, "delete, compact, or both", expect="delete|compact"),
    ConfigDef("compression.type", "producer", _compression, "final compression of the topic (producer keeps the producer's)"),
    ConfigDef("delete.retention.ms", 86_400_000, _int, "how long tombstones are kept after compaction", _nonneg, ">= 0"),
    ConfigDef("flush.messages", LONG_MAX, _int, "fsync after this many messages", _pos, ">= 1"),
    ConfigDef("flush.ms", LONG_MAX, _int, "fsync when the last one is this old", _nonneg, ">= 0"),
    ConfigDef("index.interval.bytes", 4096, _int, "bytes between offset index entries", _nonneg, ">= 0"),
    ConfigDef("leader.replication.throttled.replicas", "", _throttled_replicas,
              "replicas whose leader-side replication is throttled (partition:broker list or *)"),
    ConfigDef("follower.replication.throttled.replicas", "", _throttled_replicas,
              "replicas whose follower-side replication is throttled (partition:broker list or *)"),
    ConfigDef("max.compaction.lag.ms", LONG_MAX, _int, "longest a record stays uncompacted", _pos, ">= 1"),
    ConfigDef("max.message.bytes", 1_048_588, _int, "largest record batch size allowed", _nonneg, ">= 0"),
    ConfigDef("message.timestamp.type", "CreateTime", _ts_type, "CreateTime or LogAppendTime"),
    ConfigDef("min.cleanable.dirty.ratio", 0.5, _float, "dirty ratio above which a log is compacted", lambda v: 0 <= v <= 1, "between 0 and 1"),
    ConfigDef("file.delete.delay.ms", 60_000, _int, "how long replaced (compacted) segment files stay as .deleted",
              _nonneg, ">= 0"),
    ConfigDef("min.compaction.lag.ms", 0, _int, "minimum age of a record before compaction", _nonneg, ">= 0"),
    ConfigDef("min.insync.replicas", 1, _int, "ISR size needed for acks=all", _pos, ">= 1"),
    ConfigDef("retention.bytes", -1, _int, "size above which old segments are deleted (-1: none)", _ge_minus1, ">= -1"),
    ConfigDef("retention.ms", 604_800_000, _int, "age after which segments are deleted (-1: forever)", _ge_minus1, ">= -1"),
    ConfigDef("segment.bytes", 1_073_741_824, _int, "segment file size before rolling", lambda v: v >= 14, ">= 14"),
    ConfigDef("segment.index.bytes", 10_485_760, _int, "maximum offset index size", lambda v: v >= 8, ">= 8"),
    ConfigDef("segment.ms", 604_800_000, _int, "age of a segment before rolling", _pos, ">= 1"),
    ConfigDef("unclean.leader.election.enable", False, _bool, "allow out-of-sync replicas to become leader"),
]

TOPIC_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _DEFS}

#: Kafka topic configs Tidelog refuses rather than accept and ignore, with the reason given.
UNSUPPORTED_CONFIGS: dict[str, str] = {}


def validate_topic_configs(configs: Mapping[str, Any]) -> dict[str, Any]:
    """Parse and check user-supplied configs; raise InvalidConfigError naming the bad key."""
    out: dict[str, Any] = {}
    for key, raw in configs.items():
        d = TOPIC_CONFIGS.get(key)
        if key in UNSUPPORTED_CONFIGS:
            raise InvalidConfigError(f"topic config {key} is not supported: {UNSUPPORTED_CONFIGS[key]}")
        if d is None:
            raise InvalidConfigError(f"unknown topic config {key!r}")
        try:
            value = d.parse(raw if isinstance(raw, str) else str(raw).lower() if isinstance(raw, bool) else str(raw))
        except (ValueError, TypeError) as exc:
            raise InvalidConfigError(f"invalid value {raw!r} for {key}: {exc}") from None
        if not d.check(value):
            raise InvalidConfigError(f"invalid value {raw!r} for {key}: must be {d.expect}")
        out[key] = value
    return out


#: Dynamic per-broker configs (Kafka's ConfigResource BROKER, set per broker id or for ``<default>``).
BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in [
    ConfigDef("leader.replication.throttled.rate", LONG_MAX, _int,
              "bytes/s a leader sends to throttled followers (leader.replication.throttled.replicas)", _nonneg, ">= 0"),
    ConfigDef("follower.replication.throttled.rate", LONG_MAX, _int,
              "bytes/s a follower fetches for throttled replicas (follower.replication.throttled.replicas)",
              _nonneg, ">= 0"),
]}


def validate_broker_configs(configs: Mapping[str, Any]) -> dict[str, Any]:
    """Parse and check dynamic broker configs; raise InvalidConfigError naming the bad key."""
    out: dict[str, Any] = {}
    for key, raw in configs.items():
        d = BROKER_CONFIGS.get(key)
        if d is None:
            raise InvalidConfigError(f"unknown dynamic broker config {key!r}")
        try:
            value = d.parse(str(raw))
        except (ValueError, TypeError) as exc:
            raise InvalidConfigError(f"invalid value {raw!r} for {key}: {exc}") from None
        if not d.check(value):
            raise InvalidConfigError(f"invalid value {raw!r} for {key}: must be {d.expect}")
        out[key] = value
    return out


def check_min_insync_replicas(configs: Mapping[str, Any], replication_factor: int) -> None:
    """Refuse ``min.insync.replicas`` above the replication factor: acks=all could never succeed
    (Kafka accepts it and producers then fail with NOT_ENOUGH_REPLICAS forever)."""
    value = int(effective_configs(configs)["min.insync.replicas"])
    if value > replication_factor:
        raise InvalidConfigError(
            f"min.insync.replicas={value} is larger than the replication factor {replication_factor}"
        )


def effective_configs(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults overlaid with (already validated) overrides."""
    out = {name: d.default for name, d in TOPIC_CONFIGS.items()}
    out.update(overrides)
    return out


@dataclass(frozen=True)
class LogConfig:
    """The typed log settings a partition log obeys (Kafka topic config names in comments)."""

    segment_bytes: int = 1_073_741_824  # segment.bytes
    segment_ms: int = 604_800_000  # segment.ms
    retention_ms: int = 604_800_000  # retention.ms
    retention_bytes: int = -1  # retention.bytes
    max_message_bytes: int = 1_048_588  # max.message.bytes
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime
    flush_messages: int = LONG_MAX  # flush.messages
    flush_ms: int = LONG_MAX  # flush.ms
    index_interval_bytes: int = 4096  # index.interval.bytes
    segment_index_bytes: int = 10_485_760  # segment.index.bytes: roll when an index is this full
    cleanup_policy: str = "delete"  # cleanup.policy
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, Any]) -> LogConfig:
        # Stored overrides are validated again; one refused since it was stored is ignored, not fatal.
        c = effective_configs(validate_topic_configs({k: v for k, v in configs.items() if k not in UNSUPPORTED_CONFIGS}))
        return cls(
            segment_bytes=c["segment.bytes"],
            segment_ms=c["segment.ms"],
            retention_ms=c["retention.ms"],
            retention_bytes=c["retention.bytes"],
            max_message_bytes=c["max.message.bytes"],
            log_append_time=c["message.timestamp.type"] == "LogAppendTime",
            flush_messages=c["flush.messages"],
            flush_ms=c["flush.ms"],
            index_interval_bytes=c["index.interval.bytes"],
            segment_index_bytes=c["segment.index.bytes"],
            cleanup_policy=c["cleanup.policy"],
            extra=c,
        )
