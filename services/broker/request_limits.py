"""Bounds on the numbers a client puts in produce and fetch requests. Pure functions.

What Kafka's broker does, and what we do:

* Fetch ``max_bytes`` is capped by the broker's ``fetch.max.bytes`` (Kafka: 55 MiB by default,
  ``min(request, fetch.max.bytes)``); here 50 MiB, below the 64 MiB gRPC message limit, so a
  response always fits. ``<= 0`` means "no preference": the cap.
* ``partition_max_bytes`` is clamped into ``[0, max_bytes]`` (0: Kafka's "nothing but the first
  batch"); an unset (0) field keeps today's 1 MiB default, as the wire has no null.
* ``max_wait_ms``: Kafka treats ``<= 0`` as "answer at once"; we do too, and clamp the upper end to
  ``MAX_FETCH_WAIT_MS`` (Kafka has no cap: there the client's request timeout ends the call).
* ``min_bytes < 0`` is 0 (answer at once).
* Produce ``timeout_ms``: ``<= 0`` is "do not wait for the ISR" (Kafka: the delayed produce
  expires at once); the upper end is clamped to ``MAX_PRODUCE_TIMEOUT_MS`` so no call can hold
  an acks=all wait for days.

Clamping, not refusing: every value a Kafka client may send still works; only the resources one
request can hold are bounded.
"""

from __future__ import annotations

FETCH_MAX_BYTES = 50 * 1024 * 1024
DEFAULT_PARTITION_MAX_BYTES = 1024 * 1024
MAX_FETCH_WAIT_MS = 60_000
MAX_PRODUCE_TIMEOUT_MS = 300_000


def clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def fetch_max_bytes(requested: int) -> int:
    return FETCH_MAX_BYTES if requested <= 0 else min(requested, FETCH_MAX_BYTES)


def partition_max_bytes(requested: int, request_max: int) -> int:
    if requested == 0:
        return min(DEFAULT_PARTITION_MAX_BYTES, request_max)
    return clamp(requested, 0, request_max)


def fetch_wait_ms(requested: int) -> int:
    return clamp(requested, 0, MAX_FETCH_WAIT_MS)


def fetch_min_bytes(requested: int) -> int:
    return max(requested, 0)


def produce_timeout_ms(requested: int) -> int:
    return clamp(requested, 0, MAX_PRODUCE_TIMEOUT_MS)
