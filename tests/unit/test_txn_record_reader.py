"""The one reader of coordinator records (services/coordinator/records.py ``RecordReader``), shared by the
``__consumer_offsets`` and ``__transaction_state`` layouts: Kafka's 5-byte varint limit, lengths bounded by
the record, UTF-8 strings, and a reason with the record's name and the byte for each refusal."""

from __future__ import annotations

import struct

import pytest

from services.coordinator import records as group_records
from services.coordinator.records import RecordReader
from services.coordinator.txn import records as txn_records
from shared.errors import CorruptRecordError


def test_varints_past_five_bytes_are_refused_in_both_layouts() -> None:
    assert RecordReader(bytes.fromhex("ffffffff0f")).uvarint() == 2**32 - 1
    with pytest.raises(CorruptRecordError, match="longer than 5 bytes"):
        RecordReader(bytes.fromhex("ffffffffff01")).uvarint()


def test_strings_must_be_utf8_and_fit_the_record() -> None:
    with pytest.raises(CorruptRecordError, match="not UTF-8"):
        RecordReader(struct.pack(">h", 1) + b"\xff").str16()
    with pytest.raises(CorruptRecordError, match="not UTF-8"):
        RecordReader(b"\x02\xff").cstr()
    with pytest.raises(CorruptRecordError, match="longer than the record"):
        RecordReader(b"\x09abc").cstr()
    assert RecordReader(b"\x00").cstr() is None and RecordReader(b"\x04abc").cstr() == "abc"
    assert RecordReader(b"\x00").array_len() == 0  # a null compact array reads as empty


def test_refusals_name_the_record_and_the_byte() -> None:
    with pytest.raises(CorruptRecordError, match=r"TransactionLogKey: truncated \(needs 2 more bytes\) at byte 0 of 1"):
        txn_records.decode_key(b"\x00")
    with pytest.raises(CorruptRecordError, match=r"__consumer_offsets record: truncated"):
        group_records.decode_key(b"\x00")


def test_both_record_modules_use_the_one_reader() -> None:
    assert not hasattr(txn_records, "_Reader")
    assert group_records._Reader is RecordReader  # the name classic_records.py subclasses
