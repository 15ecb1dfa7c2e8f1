"""Large metadata writes are cut under etcd's per-transaction limits."""

from __future__ import annotations

import pytest

from shared.metadata.store import dumps
from shared.metadata.txn_limits import ETCD_MAX_TXN_OPS, split_writes


def test_chunks_respect_op_and_byte_limits_and_keep_order() -> None:
    items = [(f"/k/{i}".encode(), {"leader": i, "isr": [1, 2, 3]}) for i in range(10_000)]
    chunks = split_writes(items)
    assert [kv for c in chunks for kv in c] == items
    assert all(0 < len(c) < ETCD_MAX_TXN_OPS for c in chunks)
    big = [(b"/b/%d" % i, "x" * 300_000) for i in range(7)]
    chunks = split_writes(big, max_bytes=1_000_000)
    assert [len(c) for c in chunks] == [3, 3, 1]
    assert all(sum(len(k) + len(dumps(v)) for k, v in c) <= 1_000_000 for c in chunks)


def test_a_single_value_over_the_limit_is_an_error() -> None:
    with pytest.raises(ValueError, match="over"):
        split_writes([(b"/k", "x" * 100)], max_bytes=50)
    assert split_writes([]) == []
