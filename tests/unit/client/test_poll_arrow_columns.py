"""``shared.records.arrow.binary_column_of``: values copied by strided runs and through binary views alike."""

from __future__ import annotations

import random

import numpy as np
import pytest

from shared.records import arrow


# numpy: always runs (when any), mixed, always views; 0: the compiled gather (as the consumer runs)
@pytest.mark.parametrize("values_per_run", [1, 8, 10**9, 0])
def test_binary_column_of_equals_the_spans_in_every_buffer(monkeypatch: pytest.MonkeyPatch, values_per_run: int) -> None:
    if values_per_run:
        monkeypatch.setattr(arrow, "_compiled_gather", None)
        monkeypatch.setattr(arrow, "_VALUES_PER_RUN", values_per_run)
    else:
        assert arrow._compiled_gather is not None  # the extension is built in every test run
    rnd = random.Random(1)
    for _ in range(200):
        bufs: list[bytes] = []
        spans = []
        values: list[bytes | None] = []
        for _ in range(rnd.randint(1, 3)):
            buf = bytearray()
            starts, ends = [], []
            fixed = rnd.random() < 0.6  # records of one size: long runs
            for _ in range(rnd.randint(0, 40)):
                buf += b"xy" if fixed else b"x" * rnd.randint(0, 3)
                null = rnd.random() < 0.1
                v = rnd.randbytes(0 if null else 5 if fixed else rnd.randint(0, 20))
                starts.append(len(buf))
                buf += v
                ends.append(len(buf))
                values.append(None if null else v)
            bufs.append(bytes(buf))
            spans.append((len(bufs) - 1, np.array(starts, np.int64), np.array(ends, np.int64)))
        null = np.array([v is None for v in values], bool)
        col = arrow.binary_column_of(bufs, spans, null if null.any() else None)
        col.validate(full=True)
        assert col.to_pylist() == values


def test_gather_refuses_spans_outside_the_source_and_an_output_too_small() -> None:
    gather = arrow._compiled_gather
    assert gather is not None
    src = b"abcdefgh"
    out = np.zeros(6, np.uint8)
    assert gather(src, np.array([1, 6], np.int64), np.array([4, 8], np.int64), out, 1) == 6
    assert bytes(out) == b"\x00bcdgh"
    for starts, ends, at in (([0], [9], 0), ([3], [2], 0), ([-1], [2], 0), ([0], [4], 3), ([0], [1], 7)):
        with pytest.raises(ValueError):
            gather(src, np.array(starts, np.int64), np.array(ends, np.int64), out, at)
    with pytest.raises(ValueError):
        gather(src, np.array([0, 1], np.int64), np.array([1], np.int64), out, 0)
    with pytest.raises(BufferError):
        gather(src, np.array([0], np.int64), np.array([1], np.int64), b"immutable", 0)
