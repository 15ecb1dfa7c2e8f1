"""The Spark source's decoding of one fetched response (``source._decode`` / ``_within``) and the Arrow
record batch it makes (``shared.records.arrow.record_batch``), without a cluster."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from pipelines.tidelog_source.source import _decode, _within
from shared.records.arrow import arrow_schema, numeric, record_batch, repeated_string
from shared.records.builder import encode_batch
from shared.records.compression import CompressionType
from shared.records.header import iter_batches
from shared.types import TopicPartition

TP = TopicPartition("t", 3)


def _response(sizes: list[int], compression: CompressionType = CompressionType.NONE,
              headers: bool = False) -> tuple[bytes, list[tuple[int, int, bytes | None, bytes]]]:
    """Batches of ``sizes[i]`` records each, back to back as in a fetch response, and the records."""
    out, records = b"", []
    offset = 100
    for n in sizes:
        recs = [(1_700_000_000_000 + offset + i, None if (offset + i) % 5 == 0 else b"k%d" % (offset + i),
                 b"v" * ((offset + i) % 7 + 20), [("h", b"x")] if headers else None) for i in range(n)]
        out += encode_batch(recs, base_offset=offset, compression=compression)
        records += [(offset + i, r[0], r[1], r[2]) for i, r in enumerate(recs)]
        offset += n
    return out, records


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.ZSTD])
@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize(("start", "end"), [(0, 10_000), (103, 140), (100, 101)])
def test_a_response_decodes_to_its_records_in_range(compression, headers, start, end) -> None:
    data, records = _response([7, 30, 12], compression, headers)
    batches = list(iter_batches(data))
    pieces = [p for p in (_within(p, start, end) for p in _decode(data, batches, TP, start, headers)) if len(p[1])]
    batch = record_batch(pieces, TP.topic, TP.partition, arrow_schema(headers))
    want = [r for r in records if start <= r[0] < end]
    assert batch.column("offset").to_pylist() == [r[0] for r in want]
    assert [t.timestamp() * 1000 for t in batch.column("timestamp").to_pylist()] == [r[1] for r in want]
    assert batch.column("key").to_pylist() == [r[2] for r in want]
    assert batch.column("value").to_pylist() == [r[3] for r in want]
    assert batch.column("topic").to_pylist() == ["t"] * len(want)
    assert batch.column("partition").to_pylist() == [3] * len(want)
    assert batch.column("timestampType").to_pylist() == [0] * len(want)
    if headers:
        assert batch.column("headers").to_pylist() == [[{"key": "h", "value": b"x"}]] * len(want)


def test_plain_uncompressed_batches_are_decoded_together() -> None:
    data, _ = _response([10, 10, 10])
    pieces = _decode(data, list(iter_batches(data)), TP, 0, False)
    assert len(pieces) == 1 and len(pieces[0][1]) == 30


def test_arrow_helpers() -> None:
    assert repeated_string("topic", 3).to_pylist() == ["topic"] * 3
    assert repeated_string("", 2).to_pylist() == ["", ""]
    assert repeated_string("x", 0).to_pylist() == []
    assert numeric(np.arange(4, dtype=np.int64)[::2]).to_pylist() == [0, 2]
    assert numeric(np.array([5], np.int32)).type.bit_width == 32


def test_record_batch_does_not_import_pandas() -> None:
    """``pa.array`` imports pandas the first time (half a second), which a poll_arrow or a Spark read
    paid in its first batch; the columns are built from buffers instead."""
    code = (
        "import sys\n"
        "from tests.unit.pipelines.test_source_decode import _response, TP\n"
        "from pipelines.tidelog_source.source import _decode\n"
        "from shared.records.arrow import arrow_schema, record_batch\n"
        "from shared.records.header import iter_batches\n"
        "data, _ = _response([5, 5])\n"
        "for h in (False, True):\n"
        "    record_batch(_decode(data, list(iter_batches(data)), TP, 0, h), 't', 3, arrow_schema(h))\n"
        "print('pandas' in sys.modules)\n")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert got.stdout.strip() == "False"
