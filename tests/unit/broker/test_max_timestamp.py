"""ListOffsets -3 (KIP-734): the first record holding the log's largest timestamp."""

from __future__ import annotations

from services.broker.log import PartitionLog
from services.broker.log.max_timestamp import offset_of_max_timestamp
from shared.config import LogConfig
from shared.records import encode_batch


def batch(*timestamps: int) -> bytes:
    return encode_batch([(ts, b"k", b"v", None) for ts in timestamps])


def test_the_record_with_the_largest_timestamp_across_segments(tmp_path) -> None:
    log = PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_bytes=200))
    assert offset_of_max_timestamp(log) is None
    log.append_as_leader(batch(100, 500, 200))  # offsets 0-2
    log.append_as_leader(batch(300, 400))  # 3-4
    log.append_as_leader(batch(450, 500))  # 5-6: ties with offset 1, which came first
    assert len(log.segments) > 1
    assert offset_of_max_timestamp(log) == (1, 500)
    log.append_as_leader(batch(100, 900, 900))  # 7-9
    assert offset_of_max_timestamp(log) == (8, 900)
    log.close()
