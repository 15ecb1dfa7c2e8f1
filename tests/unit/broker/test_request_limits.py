"""Client-supplied sizes and waits are clamped to the broker's limits."""

from __future__ import annotations

from services.broker import request_limits as rl
from services.broker.replica_results import FetchParams, FetchSpec
from shared.types import TopicPartition


def test_fetch_params_are_bounded() -> None:
    tp = TopicPartition("t", 0)
    p = FetchParams(replica_id=-1, max_wait_ms=2**31 - 1, min_bytes=-5, max_bytes=2**31 - 1,
                    specs=[FetchSpec(tp, 0, 2**31 - 1), FetchSpec(tp, 0, -7)]).bounded()
    assert (p.max_wait_ms, p.min_bytes, p.max_bytes) == (rl.MAX_FETCH_WAIT_MS, 0, rl.FETCH_MAX_BYTES)
    assert [s.max_bytes for s in p.specs] == [rl.FETCH_MAX_BYTES, 0]
    p = FetchParams(max_wait_ms=-100, max_bytes=-1, specs=[FetchSpec(tp, 0, 0)]).bounded()
    assert (p.max_wait_ms, p.max_bytes, p.specs[0].max_bytes) == (0, rl.FETCH_MAX_BYTES, rl.DEFAULT_PARTITION_MAX_BYTES)
    assert FetchParams(max_wait_ms=500, min_bytes=1, max_bytes=1000).bounded().max_bytes == 1000


def test_produce_timeout_is_clamped() -> None:
    assert rl.produce_timeout_ms(-1) == 0
    assert rl.produce_timeout_ms(30_000) == 30_000
    assert rl.produce_timeout_ms(2**31 - 1) == rl.MAX_PRODUCE_TIMEOUT_MS
