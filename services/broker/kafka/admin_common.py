"""What the Kafka admin handlers (``admin_*.py``) share: per-item errors as Kafka codes and messages,
request timeouts, topic-name checks and the ``links`` to the controller.

An admin request names several items (topics, resources, entities, partitions); each gets its own
error code and message, and an unexpected failure of one item is logged and answered
``UNKNOWN_SERVER_ERROR`` for that item (``item_error``), never a dropped connection. ACLs
(``authorize``) refuse an item with Kafka's ``*_AUTHORIZATION_FAILED`` code the same way.
Must not import the handler modules.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from services.broker.kafka.apis import KafkaApis
from services.broker.kafka.cluster_links import ClusterLinks
from services.broker.pipeline import RequestContext
from shared.errors import ErrorCode, TidelogError
from shared.security.access import AuthorizationFailed
from shared.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from shared.topic_names import validate_topic_name

log = logging.getLogger(__name__)

#: The longest a handler waits for its change to reach this broker's metadata view (Kafka clients send
#: 30-60 s timeouts; the change is committed at the controller whatever the wait gives).
MAX_VIEW_WAIT_S = 30.0


class ItemError(Exception):
    """One item's failure: a Kafka code and the message clients show."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @classmethod
    def of(cls, exc: TidelogError) -> ItemError:
        return cls(exc.code, exc.args[0] if exc.args else exc.code.name)


def item_error(exc: BaseException, what: str) -> ItemError:
    """The error answered for an item whose handling raised ``exc``."""
    if isinstance(exc, ItemError):
        return exc
    if isinstance(exc, AuthorizationFailed):
        return ItemError(exc.code, exc.message)
    if isinstance(exc, TidelogError):
        return ItemError.of(exc)
    log.exception("admin request failed", extra={"item": what})
    return ItemError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{what}: unexpected {type(exc).__name__} on the broker")


def authorize(apis: KafkaApis, ctx: RequestContext, op: AclOperation, rtype: ResourceType,
              name: str = CLUSTER_NAME) -> None:
    """Raise ``AuthorizationFailed`` (an item's error through ``item_error``) unless ACLs allow it."""
    access = apis.pipeline.access
    if access.enabled:
        access.require(ctx, op, rtype, name)


def allowed(apis: KafkaApis, ctx: RequestContext, op: AclOperation, rtype: ResourceType,
            name: str = CLUSTER_NAME) -> bool:
    """``authorize`` as a boolean, without auditing (for rules with an alternative, e.g. CLUSTER or TOPIC)."""
    access = apis.pipeline.access
    return not access.enabled or access.allowed(ctx, op, rtype, name)


def timeout_s(value: Any) -> float:
    """A request's ``timeout`` (a timedelta from kio), in seconds, within ``[0, MAX_VIEW_WAIT_S]``."""
    seconds = value.total_seconds() if isinstance(value, datetime.timedelta) else float(value or 0) / 1000
    return min(max(seconds, 0.0), MAX_VIEW_WAIT_S)


def check_topic_name(name: str | None) -> str:
    """``name`` if Kafka allows it as a topic name, else ``INVALID_TOPIC_EXCEPTION``."""
    if name is None:
        raise ItemError(ErrorCode.INVALID_TOPIC_EXCEPTION, "topic name is null")
    try:
        validate_topic_name(name)
    except TidelogError as exc:
        raise ItemError.of(exc) from None
    return name


def links(apis: KafkaApis) -> ClusterLinks:
    """The broker's links to the controller (``NOT_CONTROLLER``, retriable, while there are none)."""
    found = apis.broker.links
    if found is None:
        raise ItemError(ErrorCode.NOT_CONTROLLER, "this broker has no link to the controller yet")
    return found


def duplicates(names: list[Any]) -> set[Any]:
    """The names given more than once."""
    seen: set[Any] = set()
    repeated: set[Any] = set()
    for n in names:
        (repeated if n in seen else seen).add(n)
    return repeated
