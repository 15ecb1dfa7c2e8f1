"""The producer's retry decisions (``RetryPolicy``), without threads or a network: what a failed attempt
says about its batch, which errors are tried again, and the delivery deadline."""

from __future__ import annotations

from shared.client.futures import KafkaTimeoutError
from shared.client.idempotence import IdempotenceState
from shared.client.producer_batch import ProducerBatch
from shared.client.retry_policy import RetryPolicy
from shared.errors import ErrorCode, TidelogError, error_for
from shared.types import TopicPartition

TP = TopicPartition("t", 0)


def _policy(*, retries: int = 5, idempotent: bool = True, state: IdempotenceState | None = None) -> RetryPolicy:
    return RetryPolicy(retries=retries, retry_backoff_s=0.1, delivery_timeout_s=2.0, idempotent=idempotent,
                       state=state or IdempotenceState())


def test_a_definite_refusal_proves_the_attempt_unwritten_and_a_lost_connection_does_not() -> None:
    policy = _policy()
    refused = ProducerBatch(TP, 0.0)
    policy.record_failed_attempt(refused, error_for(ErrorCode.NOT_ENOUGH_REPLICAS), refused=True, sent=True)
    assert refused.attempts == 1 and not refused.maybe_written
    assert refused.last_error is not None and refused.last_error.code == ErrorCode.NOT_ENOUGH_REPLICAS

    lost = ProducerBatch(TP, 0.0)
    policy.record_failed_attempt(lost, TidelogError("connection lost", code=ErrorCode.NETWORK_EXCEPTION),
                                 refused=False, sent=True)
    assert lost.maybe_written

    never_sent = ProducerBatch(TP, 0.0)
    policy.record_failed_attempt(never_sent, error_for(ErrorCode.LEADER_NOT_AVAILABLE), refused=False, sent=False)
    assert not never_sent.maybe_written


def test_retriable_errors_are_retried_until_the_attempts_run_out() -> None:
    policy = _policy(retries=1)
    batch = ProducerBatch(TP, 0.0)
    error = error_for(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    policy.record_failed_attempt(batch, error, refused=True, sent=True)
    assert policy.may_retry(batch, error)
    policy.record_failed_attempt(batch, error, refused=True, sent=True)
    assert not policy.may_retry(batch, error)
    assert not policy.may_retry(ProducerBatch(TP, 0.0), error_for(ErrorCode.MESSAGE_TOO_LARGE))


def test_out_of_order_is_retried_only_behind_a_failed_predecessor() -> None:
    state = IdempotenceState()
    state.set_producer_id(7, 0)
    first, second = ProducerBatch(TP, 0.0), ProducerBatch(TP, 0.0)
    for b in (first, second):
        b.records.append(b"v", None, 0, None)
        state.encode(b, lambda pid, epoch, seq: (b"h", b"r"))
    error = error_for(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert not _policy(state=state).retriable(first, error)  # the very next expected sequence: fatal
    assert _policy(state=state).retriable(second, error)  # behind ``first``: send it again after it
    assert not _policy(state=state, idempotent=False).retriable(second, error)


def test_the_deadline_counts_from_creation_and_names_the_last_error() -> None:
    policy = _policy()
    batch = ProducerBatch(TP, 10.0)
    assert not policy.expired(batch, 12.0) and policy.expired(batch, 12.01)
    assert "waiting to be sent" in str(policy.waited_out_error(batch))
    policy.record_failed_attempt(batch, error_for(ErrorCode.REQUEST_TIMED_OUT), refused=False, sent=True)
    err = policy.waited_out_error(batch)
    assert isinstance(err, KafkaTimeoutError) and "REQUEST_TIMED_OUT" in str(err)
    assert "REQUEST_TIMED_OUT" in str(policy.expired_error(batch, error_for(ErrorCode.REQUEST_TIMED_OUT)))
