"""Kafka's client metrics for ``Producer.metrics()`` and ``Consumer.metrics()``.

Counted once per request or response (never per record: a batch knows its record count), under a
lock because the producer's responses arrive on one reader thread per broker. Rates are averages
since the client started (Kafka's are over a 30 s window: the difference shows only while rates change).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any


class ProducerStats:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.requests = self.batches = self.records = self.bytes = 0
        self.responses = 0
        self.latency_s = 0.0
        self.latency_max_s = 0.0

    def sent(self, batches: Iterable[Any], nbytes: int) -> None:
        """One ProduceRequest went out carrying ``batches`` (``.count`` records each), ``nbytes`` of batches."""
        n = b = 0
        for batch in batches:
            n += batch.count
            b += 1
        with self.lock:
            self.requests += 1
            self.batches += b
            self.records += n
            self.bytes += nbytes

    def answered(self, latency_s: float) -> None:
        with self.lock:
            self.responses += 1
            self.latency_s += latency_s
            if latency_s > self.latency_max_s:
                self.latency_max_s = latency_s

    def snapshot(self) -> dict[str, float]:
        with self.lock:
            elapsed = max(time.monotonic() - self.started, 1e-9)
            return {
                "record-send-total": self.records,
                "record-send-rate": self.records / elapsed,
                "records-per-request-avg": self.records / self.requests if self.requests else 0.0,
                "batch-size-avg": self.bytes / self.batches if self.batches else 0.0,
                "request-total": self.requests,
                "request-rate": self.requests / elapsed,
                "request-latency-avg": 1000 * self.latency_s / self.responses if self.responses else 0.0,
                "request-latency-max": 1000 * self.latency_max_s,
                "outgoing-byte-rate": self.bytes / elapsed,
            }


class ConsumerStats:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.fetches = 0
        self.bytes = 0

    def fetched(self, nbytes: int) -> None:
        """One fetch response handled (called under the consumer's lock)."""
        self.fetches += 1
        self.bytes += nbytes

    def snapshot(self, lags: Iterable[int]) -> dict[str, float]:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return {
            "fetch-total": self.fetches,
            "fetch-rate": self.fetches / elapsed,
            "bytes-consumed-total": self.bytes,
            "bytes-consumed-rate": self.bytes / elapsed,
            "records-lag-max": max(lags, default=0),
        }
