"""InitProducerId, for both doors: a producer id for an idempotent producer (blocks of ids reserved in
etcd). A transactional id is refused until the transaction coordinator exists."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from services.broker.api import BrokerApi
from shared.errors import ErrorCode

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ProducerIdAnswer:
    error: ErrorCode = ErrorCode.NONE
    producer_id: int = -1
    producer_epoch: int = -1


async def init_producer_id(b: BrokerApi, transactional_id: str | None,
                           refuse_transactional: ErrorCode = ErrorCode.UNSUPPORTED_VERSION) -> ProducerIdAnswer:
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
