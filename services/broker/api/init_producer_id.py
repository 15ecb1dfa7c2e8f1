"""InitProducerId, for both doors: a producer id for an idempotent producer (blocks of ids reserved in
etcd). A transactional id is refused until the transaction coordinator exists.

ACLs (Kafka's ``handleInitProducerIdRequest``): a transactional id needs TRANSACTIONAL_ID WRITE on it
(``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``); an idempotent producer IDEMPOTENT_WRITE on the cluster or WRITE
on some topic (``CLUSTER_AUTHORIZATION_FAILED``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from services.broker.api import BrokerApi
from shared.errors import ErrorCode
from shared.request_context import RequestContext
from shared.security.access import CLUSTER, IDEMPOTENT_WRITE, TOPIC, TRANSACTIONAL_ID, WRITE
from shared.security.acl import CLUSTER_NAME

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ProducerIdAnswer:
    error: ErrorCode = ErrorCode.NONE
    producer_id: int = -1
    producer_epoch: int = -1


def authorize(b: BrokerApi, ctx: RequestContext | None, transactional_id: str | None) -> ErrorCode:
    """``NONE`` or the Kafka error refusing this InitProducerId (audited)."""
    access = b.pipeline.access
    if not access.enabled or ctx is None:
        return ErrorCode.NONE
    if transactional_id:
        if access.check(ctx, WRITE, TRANSACTIONAL_ID, transactional_id):
            return ErrorCode.NONE
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if access.allowed(ctx, IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME) or access.allowed_any(ctx, WRITE, TOPIC):
        return ErrorCode.NONE
    access.denied(ctx, IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME, detail="nor WRITE on any topic")
    return ErrorCode.CLUSTER_AUTHORIZATION_FAILED


async def init_producer_id(b: BrokerApi, transactional_id: str | None,
                           refuse_transactional: ErrorCode = ErrorCode.UNSUPPORTED_VERSION,
                           ctx: RequestContext | None = None) -> ProducerIdAnswer:
    code = authorize(b, ctx, transactional_id)
    if code:
        return ProducerIdAnswer(code)
    if transactional_id:
        return ProducerIdAnswer(refuse_transactional)
    if b.allocate_producer_id is None:
        return ProducerIdAnswer(ErrorCode.BROKER_NOT_AVAILABLE)
    try:
        pid = await b.allocate_producer_id()
    except Exception:
        log.exception("producer id allocation failed")
        return ProducerIdAnswer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return ProducerIdAnswer(producer_id=pid, producer_epoch=0)
