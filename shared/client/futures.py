"""Lightweight per-record futures: one shared result per batch, one small object per record (as Kafka's client does)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, NamedTuple, Self, TypeVar

from shared.errors import KafkaTimeoutError
from shared.types import TopicPartition


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int


class ProduceRequestResult:
    """Completion of one batch: base offset or error, shared by its records' futures."""

    __slots__ = ("tp", "_event", "base_offset", "log_append_time", "error", "_callbacks")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self._event = threading.Event()
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self._callbacks: list[Callable[[ProduceRequestResult], None]] = []

    def complete(self, base_offset: int, log_append_time: int = -1, error: BaseException | None = None) -> None:
        if self._event.is_set():
            return
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.error = error
        self._event.set()
        for cb in self._callbacks:
            cb(self)
        self._callbacks = []

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def add_callback(self, cb: Callable[[ProduceRequestResult], None]) -> None:
        if self._event.is_set():
            cb(self)
        else:
            self._callbacks.append(cb)


T = TypeVar("T")


class ResultFuture(Generic[T]):
    """What the producer's futures share: one batch's ``ProduceRequestResult`` and a ``_value()`` that
    reads this future's answer from it (raising the batch's error)."""

    __slots__ = ("_result",)
    _result: ProduceRequestResult

    def _value(self) -> T:
        raise NotImplementedError

    def done(self) -> bool:
        return self._result.done()

    def get(self, timeout: float | None = None) -> T:
        if not self._result.wait(timeout):
            raise KafkaTimeoutError(f"no acknowledgement within {timeout}s")
        return self._value()

    result = get

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._result.wait(timeout)
        return self._result.error

    def add_callback(self, fn: Callable[[T], None]) -> Self:
        def cb(r: ProduceRequestResult) -> None:
            if r.error is None:
                fn(self._value())

        self._result.add_callback(cb)
        return self

    def add_errback(self, fn: Callable[[BaseException], None]) -> Self:
        def cb(r: ProduceRequestResult) -> None:
            if r.error is not None:
                fn(r.error)

        self._result.add_callback(cb)
        return self


class FutureRecordMetadata(ResultFuture[RecordMetadata]):
    """The future ``Producer.send`` returns; ``get()`` gives ``RecordMetadata`` or raises."""

    __slots__ = ("_relative", "_timestamp")

    def __init__(self, result: ProduceRequestResult, relative_offset: int, timestamp: int) -> None:
        self._result = result
        self._relative = relative_offset
        self._timestamp = timestamp

    def _value(self) -> RecordMetadata:
        r = self._result
        if r.error is not None:
            raise r.error
        offset = r.base_offset + self._relative if r.base_offset >= 0 else -1
        ts = r.log_append_time if r.log_append_time >= 0 else self._timestamp
        return RecordMetadata(r.tp.topic, r.tp.partition, offset, ts)


def _future_maker() -> Callable[[ProduceRequestResult, int, int], FutureRecordMetadata]:
    """``FutureRecordMetadata(result, relative_offset, timestamp)``, made by the compiled ``new_future``
    where it is built (the same object without running ``__init__``: ~0.3 µs less per ``send()``)."""
    from shared.records.compiled import speedups

    if speedups is None or not hasattr(speedups, "new_future"):
        return FutureRecordMetadata
    speedups.set_future_class(FutureRecordMetadata)
    return speedups.new_future  # type: ignore[no-any-return]


#: what ``Producer.send`` makes its per-record future with
new_future = _future_maker()
