"""The group -> partition hash (Java String.hashCode, Kafka's Utils.abs) and the record layouts."""

from __future__ import annotations

import struct

import pytest

from services.coordinator import records as r
from shared.errors import CorruptRecordError
from shared.offsets_topic import java_string_hash, kafka_abs, partition_for


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),  # the famous Integer.MIN_VALUE hash
        ("\U0001F600", 0xD83D * 31 + 0xDE00),  # UTF-16 surrogate pair, as Java sees it
        ("my-group-1234567890", None),
    ],
)
def test_java_string_hash(s: str, expected: int | None) -> None:
    h = java_string_hash(s)
    assert -(2**31) <= h < 2**31
    if expected is not None:
        assert h == expected


def test_partition_uses_utils_abs_not_to_positive() -> None:
    assert kafka_abs(-(2**31)) == 0
    assert partition_for("polygenelubricants") == 0
    assert kafka_abs(-7) == 7
    negative = next(g for g in (f"group-{i}" for i in range(1000)) if java_string_hash(g) < 0)
    h = java_string_hash(negative)
    assert partition_for(negative) == (-h) % 50
    assert partition_for("hello", 7) == 99162322 % 7


def test_offset_commit_key_and_value_bytes() -> None:
    key = r.encode_key(r.RecordKey(r.OFFSET_COMMIT, "g", topic="t", partition=3))
    assert key == struct.pack(">h", 1) + b"\x00\x01g" + b"\x00\x01t" + struct.pack(">i", 3)
    value = r.encode_offset(r.OffsetValue(42, 5, "m", 1000))
    assert value == struct.pack(">hqi", 3, 42, 5) + b"\x00\x01m" + struct.pack(">q", 1000)
    assert r.decode_offset(value) == r.OffsetValue(42, 5, "m", 1000)
    assert r.decode_key(key) == r.RecordKey(r.OFFSET_COMMIT, "g", topic="t", partition=3)
    legacy = struct.pack(">hq", 1, 7) + b"\x00\x00" + struct.pack(">qq", 5, -1)  # v1 with expireTimestamp
    assert r.decode_offset(legacy).offset == 7


def test_kip848_records_round_trip() -> None:
    tid = "0123456789abcdef0123456789abcdef"
    member = r.MemberMetadataValue("inst", None, "client", "/127.0.0.1", ["a", "b"], "t.*", 30000, "uniform")
    assert r.decode_member(r.encode_member(member)) == member
    cur = r.CurrentAssignmentValue(4, 3, r.MemberState.UNREVOKED_PARTITIONS, {tid: [0, 2]}, {tid: [1]})
    assert r.decode_current(r.encode_current(cur)) == cur
    assert r.decode_target_member(r.encode_target_member({tid: [5, 1]})) == {tid: [1, 5]}
    assert r.decode_group_metadata(r.encode_group_metadata(9, -5)) == (9, -5)
    assert r.decode_epoch(r.encode_epoch(9)) == 9
    # Flexible layout: version 0, epoch, one tagged field (tag 0, 8 bytes).
    assert r.encode_group_metadata(1, 2) == struct.pack(">hi", 0, 1) + b"\x01\x00\x08" + struct.pack(">q", 2)
    key = r.encode_key(r.RecordKey(r.CURRENT_MEMBER_ASSIGNMENT, "g", "m"))
    assert key == struct.pack(">h", 8) + b"\x00\x01g\x00\x01m"
    # GroupMetadataKey (type 2): a classic group (its value is tested in test_classic_group.py).
    assert r.decode_key(struct.pack(">h", 2) + b"\x00\x01g") == r.RecordKey(r.GROUP_METADATA_CLASSIC, "g")
    assert r.encode_key(r.RecordKey(r.GROUP_METADATA_CLASSIC, "g")) == struct.pack(">h", 2) + b"\x00\x01g"


def test_unknown_and_truncated_records() -> None:
    assert r.decode_key(struct.pack(">h", 20) + b"\x00\x01g") is None
    with pytest.raises(CorruptRecordError):
        r.decode_offset(struct.pack(">hq", 3, 1))
