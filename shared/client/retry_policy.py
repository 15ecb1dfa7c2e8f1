"""When a failed produce attempt is tried again (Kafka's ``retries``, ``retry.backoff.ms`` and
``delivery.timeout.ms``), and what a failed attempt says about the batch.

Decisions only: the sender books each failed attempt here, asks whether to retry, and acts (re-enqueue,
or complete the batch's future with the error built here). No threads, no network; the clock is passed
in. The idempotent producer's rules come from the producer-state object (``shared.client.idempotence``
today, a transaction manager later): which refusals prove a batch unwritten, and whether an
OUT_OF_ORDER_SEQUENCE_NUMBER answer is only a batch arriving behind a failed predecessor.
Must not import the sender, the connection or the producer.
"""

from __future__ import annotations

import logging

from shared.client.futures import KafkaTimeoutError
from shared.client.idempotence import ProducerState, refusal_proves_unwritten
from shared.client.producer_batch import ProducerBatch
from shared.errors import RETRIABLE, ErrorCode, TidelogError

log = logging.getLogger("shared.client.producer")  # every producer log line under one name, as before the split


class RetryPolicy:
    """``retries``, ``retry_backoff_ms`` and ``delivery_timeout_ms`` of one producer."""

    def __init__(self, *, retries: int, retry_backoff_s: float, delivery_timeout_s: float, idempotent: bool,
                 state: ProducerState) -> None:
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.delivery_timeout_s = delivery_timeout_s
        self.idempotent = idempotent
        self.state = state

    def record_failed_attempt(self, batch: ProducerBatch, error: TidelogError, *, refused: bool, sent: bool) -> None:
        """Book a failed attempt on ``batch``. ``refused``: the error is the broker's answer to this very
        batch; ``sent``: the attempt reached the wire (False when no leader or connection was found).

        A definite refusal (NOT_ENOUGH_REPLICAS, or any non-retriable answer but UNKNOWN_SERVER_ERROR,
        see ``refusal_proves_unwritten``) proves the attempt was not written. Other retriable answers
        may come after the append (REQUEST_TIMED_OUT or NOT_LEADER_OR_FOLLOWER from the acks=all wait), and a
        lost connection says nothing: giving those numbers back could make a later batch look like a
        duplicate of a written one, which the broker would acknowledge without writing it."""
        batch.attempts += 1
        batch.last_error = error
        if refused and refusal_proves_unwritten(error.code, error.retriable):
            if error.retriable and self.state.first_refusal(batch.tp, error.code):
                log.warning("%s: the broker refused a batch: %s; retrying for up to delivery_timeout_ms (%d ms)",
                            batch.tp, error, int(self.delivery_timeout_s * 1000))
        elif sent:
            batch.maybe_written = True

    def expired(self, batch: ProducerBatch, now: float) -> bool:
        """Has ``batch`` outlived ``delivery_timeout_ms`` (counted from its creation, retries included)?"""
        return now - batch.created > self.delivery_timeout_s

    def may_retry(self, batch: ProducerBatch, error: TidelogError) -> bool:
        """Is ``error`` worth another attempt, and has ``batch`` attempts left? (Not counting its deadline.)"""
        return self.retriable(batch, error) and batch.attempts <= self.retries

    def retriable(self, batch: ProducerBatch, error: TidelogError) -> bool:
        if error.code in RETRIABLE:
            return True
        # With several batches in flight, a batch behind a failed one arrives out of order: send it
        # again after its predecessor. A batch re-sequenced since it was sent (encoded is None) was
        # refused for its old number. Only the very next expected sequence being refused is fatal.
        return (self.idempotent and error.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
                and (batch.encoded is None or not self.state.is_next_expected(batch)))

    def expired_error(self, batch: ProducerBatch, error: TidelogError) -> KafkaTimeoutError:
        """The error of a batch whose last attempt failed with ``error`` after its deadline."""
        return KafkaTimeoutError(f"{batch.tp}: batch expired after {self.delivery_timeout_s}s ({error})")

    def waited_out_error(self, batch: ProducerBatch) -> KafkaTimeoutError:
        """The error of a batch that waited in the accumulator past its deadline (Kafka's expired batches)."""
        cause = f" ({batch.last_error})" if batch.last_error is not None else " waiting to be sent"
        return KafkaTimeoutError(f"{batch.tp}: batch expired after {self.delivery_timeout_s}s{cause}")
