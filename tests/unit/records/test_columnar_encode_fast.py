"""The columnar encoder's fast paths (issue 26): the column-by-column varints and the constant-column
shortcut give exactly the per-value encoding, sections are views (no copy per batch) whose bytes are the
builder's, and importing the columnar producer does not import pandas (seconds on a first call)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from shared.records.builder import BatchBuilder
from shared.records.columnar_encode import encode_sections, section_builder, varint_matrix
from shared.records.compression import CompressionType
from shared.records.varint import encode_zigzag


def _expected(values: np.ndarray) -> list[bytes]:
    return [encode_zigzag(int(v)) for v in values]


def _rows(mat: np.ndarray, lens: np.ndarray) -> list[bytes]:
    return [bytes(mat[i, :lens[i]]) for i in range(len(lens))]


@pytest.mark.parametrize("values", [
    np.full(10, -1), np.full(10, 1024), np.full(3, 2**62), np.array([-2**63, 2**63 - 1, 0, -1, 1]),
    np.arange(10_000), np.array([7]), np.full(5, -(2**40)),
])
def test_varint_matrix_matches_per_value(values: np.ndarray) -> None:
    v = np.asarray(values, dtype=np.int64)
    mat, lens = varint_matrix(v)
    assert lens.dtype == np.int64 and mat.dtype == np.uint8
    assert _rows(mat, lens) == _expected(v)
    assert mat.shape[1] == int(lens.max())
    if v.min() != v.max():  # bytes past a varint's end are zero, as the general path leaves them
        for i in range(len(v)):
            assert not mat[i, lens[i]:].any()


def test_varint_matrix_random() -> None:
    rng = np.random.default_rng(26)
    for bits in range(0, 64, 5):
        v = rng.integers(-(2**bits), 2**bits, 300, dtype=np.int64)
        mat, lens = varint_matrix(v)
        assert _rows(mat, lens) == _expected(v)


def _column(rows: int, width: int) -> pa.Array:
    data = np.random.default_rng(1).integers(0, 256, rows * width, dtype=np.uint8)
    offsets = np.arange(rows + 1, dtype=np.int64) * width
    return pa.Array.from_buffers(pa.large_binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def test_sections_are_views_with_the_builders_bytes() -> None:
    n = 300
    values, keys = _column(n, 100), _column(n, 16)
    ts = np.arange(n, dtype=np.int64) + 1_700_000_000_000
    sections = encode_sections(values, keys, ts, np.array([0, 120], dtype=np.int64))
    assert all(isinstance(s.body, memoryview) and s.body.readonly for s in sections)
    for s, (lo, hi) in zip(sections, ((0, 120), (120, n)), strict=True):
        b = BatchBuilder()
        for i in range(lo, hi):
            b.append(values[i].as_py(), key=keys[i].as_py(), timestamp=int(ts[i]))
        assert section_builder(s).build() == b.build()
        assert isinstance(section_builder(s, CompressionType.LZ4).body, bytes)  # the codecs get bytes


def test_importing_send_batch_does_not_import_pandas() -> None:
    code = "import sys, shared.client.send_batch; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
