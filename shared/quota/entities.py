"""Quota entities, quota keys, validation and Kafka's eight-level precedence.

An entity is ``(user, client-id)`` where either part may be absent (``None``),
a name, or the default (``DEFAULT``). Entries are stored per entity with a
value per key. For a connection's ``(user, client_id)`` each quota key is
resolved separately, from the most specific level to the least (Kafka's
order)::

    1 user + client-id            5 <default> user + <default> client-id
    2 user + <default> client-id  6 <default> user
    3 user                        7 client-id
    4 <default> user + client-id  8 <default> client-id

The matched entity also says who shares the quota (Kafka's metric tags): the
real user name if the entity has a user part, the real client id if it has a
client-id part. So a ``<default>`` client-id quota gives every client id its
own limit, while a ``user`` quota is shared by all of that user's clients.
Must not import services/.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any
from urllib.parse import quote, unquote

from shared.errors import QuotaConfigError

log = logging.getLogger(__name__)

DEFAULT = "<default>"
#: The principal of every connection until authentication exists (Kafka's name for it).
ANONYMOUS = "ANONYMOUS"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
#: Tidelog's extension: 1 makes the entity's limits hold for the sum over all brokers.
CLUSTER_WIDE = "cluster_wide"
RATE_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
QUOTA_KEYS = (*RATE_KEYS, CLUSTER_WIDE)
ENTITY_TYPES = ("user", "client-id")
MAX_NAME = 255


class QuotaType(IntEnum):
    """What a usage amount measures (the wire numbers of quota.proto)."""

    PRODUCE = 0  # bytes appended
    FETCH = 1  # bytes returned to consumers
    REQUEST = 2  # request handler time, in percent-seconds (seconds × 100)


KEY_OF_TYPE = {QuotaType.PRODUCE: PRODUCER_BYTE_RATE, QuotaType.FETCH: CONSUMER_BYTE_RATE,
               QuotaType.REQUEST: REQUEST_PERCENTAGE}


@dataclass(frozen=True, order=True)
class QuotaEntity:
    """``user`` / ``client_id``: None (no such part), a name, or ``DEFAULT``."""

    user: str | None = None
    client_id: str | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise QuotaConfigError("a quota entity needs a user, a client-id or both")
        for kind, name in (("user", self.user), ("client-id", self.client_id)):
            if name is not None and (not name or len(name) > MAX_NAME or not name.isprintable()):
                raise QuotaConfigError(f"invalid {kind} name {name!r}: 1-{MAX_NAME} printable characters")

    def as_dict(self) -> dict[str, str | None]:
        """Kafka's entity shape: ``{"user": name|null(default), "client-id": ...}``, absent parts left out."""
        out: dict[str, str | None] = {}
        if self.user is not None:
            out["user"] = None if self.user == DEFAULT else self.user
        if self.client_id is not None:
            out["client-id"] = None if self.client_id == DEFAULT else self.client_id
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, str | None]) -> QuotaEntity:
        unknown = set(d) - set(ENTITY_TYPES)
        if unknown:
            raise QuotaConfigError(f"unknown entity type(s) {sorted(unknown)}; expected user and/or client-id")
        user = (d["user"] if d["user"] is not None else DEFAULT) if "user" in d else None
        client = (d["client-id"] if d["client-id"] is not None else DEFAULT) if "client-id" in d else None
        return cls(user, client)

    def path(self) -> str:
        """The etcd key suffix: ``users/<u>[/clients/<c>]`` or ``clients/<c>`` (names percent-encoded)."""
        parts = []
        if self.user is not None:
            parts += ["users", quote(self.user, safe="")]
        if self.client_id is not None:
            parts += ["clients", quote(self.client_id, safe="")]
        return "/".join(parts)

    @classmethod
    def from_path(cls, path: str) -> QuotaEntity:
        parts = path.split("/")
        user = client = None
        if len(parts) >= 2 and parts[0] == "users":
            user, parts = unquote(parts[1]), parts[2:]
        if len(parts) == 2 and parts[0] == "clients":
            client, parts = unquote(parts[1]), []
        if parts or (user is None and client is None):
            raise QuotaConfigError(f"not a quota entity path: {path!r}")
        return cls(user, client)

    def __str__(self) -> str:
        return ", ".join(f"{k}={'<default>' if v is None else v}" for k, v in self.as_dict().items())


def validate_value(key: str, value: float) -> float:
    """A quota value as Kafka checks it: byte rates and request percentage positive, cluster_wide 0 or 1."""
    if key not in QUOTA_KEYS:
        raise QuotaConfigError(f"unknown quota key {key!r}; expected one of {', '.join(QUOTA_KEYS)}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise QuotaConfigError(f"{key}: not a number: {value!r}") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise QuotaConfigError(f"{key}: must be finite, got {value!r}")
    if key == CLUSTER_WIDE:
        if v not in (0.0, 1.0):
            raise QuotaConfigError(f"{key}: must be 0 or 1, got {value!r}")
    elif v <= 0:
        raise QuotaConfigError(f"{key}: must be positive, got {value!r}")
    elif key in (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE) and v != int(v):
        raise QuotaConfigError(f"{key}: must be a whole number of bytes per second, got {value!r}")
    return v


def apply_ops(current: Mapping[str, float], ops: Iterable[tuple[str, float | None]]) -> dict[str, float]:
    """Kafka's AlterClientQuotas ops on one entity: a value sets the key, None removes it."""
    out = dict(current)
    for key, value in ops:
        if value is None:
            if key not in QUOTA_KEYS:
                raise QuotaConfigError(f"unknown quota key {key!r}; expected one of {', '.join(QUOTA_KEYS)}")
            out.pop(key, None)
        else:
            out[key] = validate_value(key, value)
    return out


#: Kafka's precedence: for each level, which (user, client-id) entity to look up.
_LEVELS = ("uc", "ud", "u-", "dc", "dd", "d-", "-c", "-d")


def candidates(user: str, client_id: str) -> list[QuotaEntity]:
    """The eight entities, most specific first, that can hold a quota for this connection."""
    return [e for e in _candidates(user, client_id) if e is not None]


def _candidates(user: str, client_id: str) -> list[QuotaEntity | None]:
    """Like ``candidates`` but keeps each level's place (None where an empty name cannot match)."""
    pick = {"u": user, "d": DEFAULT, "-": None}
    out: list[QuotaEntity | None] = []
    for level in _LEVELS:
        u = pick[level[0]]
        c = client_id if level[1] == "c" else pick[level[1]]
        out.append(None if u == "" or c == "" else QuotaEntity(u, c))
    return out


@dataclass(frozen=True)
class Match:
    """The entry that applies to a connection for one key, the level it matched at (1-8) and
    the group sharing it (Kafka's metric tags: ``(user or "", client_id or "")``)."""

    key: str
    value: float
    entity: QuotaEntity
    level: int
    group: tuple[str, str]
    cluster_wide: bool


def resolve(configs: Mapping[QuotaEntity, Mapping[str, float]], user: str, client_id: str, key: str) -> Match | None:
    """The quota for ``key`` that applies to ``(user, client_id)``, or None if no entry sets it."""
    for level, entity in enumerate(_candidates(user, client_id), start=1):
        entry = configs.get(entity) if entity is not None else None
        if entry is not None and key in entry:
            group = (user if entity.user is not None else "", client_id if entity.client_id is not None else "")
            assert entity is not None
            return Match(key, entry[key], entity, level, group, bool(entry.get(CLUSTER_WIDE, 0)))
    return None


def parse_configs(prefix: bytes, snapshot: Mapping[bytes, tuple[Any, ...]]) -> dict[QuotaEntity, dict[str, float]]:
    """The entries stored in etcd under ``prefix`` (a watch snapshot: key -> (value, ...)); a bad one is
    logged and skipped. Read by the quota service and, for their provisional decisions, by brokers."""
    out: dict[QuotaEntity, dict[str, float]] = {}
    for key, (value, *_) in snapshot.items():
        path = key[len(prefix):].decode()
        try:
            out[QuotaEntity.from_path(path)] = {k: validate_value(k, v) for k, v in dict(value).items()}
        except (QuotaConfigError, TypeError, ValueError) as exc:
            log.warning("ignoring bad quota entry", extra={"key": path, "error": str(exc)})
    return out
