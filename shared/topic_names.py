"""Topic name rules, as Kafka's ``Topic.validate`` applies them."""

from __future__ import annotations

import re

from shared.errors import InvalidTopicError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def validate_topic_name(name: str) -> None:
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is {len(name)} characters long; the maximum is {MAX_NAME_LENGTH}")
    if not _LEGAL.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: only ASCII letters, digits, '.', '_' and '-' are allowed"
        )


def collision_key(name: str) -> str:
    """Names that differ only in '.' versus '_' collide (their metric names would clash)."""
    return name.replace(".", "_")


def find_collision(name: str, existing: list[str] | set[str]) -> str | None:
    key = collision_key(name)
    for other in existing:
        if other != name and collision_key(other) == key:
            return other
    return None
