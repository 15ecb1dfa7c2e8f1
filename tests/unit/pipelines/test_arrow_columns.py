"""The Spark source's Arrow columns: values cut from a fetched buffer through binary views."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.tidelog_source.source import binary_column


@settings(deadline=None)  # the first call loads Arrow's cast kernels
@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), min_size=1, max_size=50), st.binary(max_size=8))
def test_binary_column_equals_the_spans_it_was_given(values, filler) -> None:
    buf = bytearray()
    starts, ends = [], []
    for v in values:  # values laid out with filler between them, as records lay out their fields
        buf += filler
        starts.append(len(buf))
        buf += v or b""
        ends.append(len(buf))
    null = np.array([v is None for v in values])
    col = binary_column(bytes(buf), np.array(starts, np.int64), np.array(ends, np.int64), null if null.any() else None)
    assert col.to_pylist() == values
