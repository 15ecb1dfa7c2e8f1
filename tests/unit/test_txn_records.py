"""``__transaction_state`` records (services/coordinator/txn/records.py) against byte fixtures written by
hand from Kafka's TransactionLogKey.json / TransactionLogValue.json, plus round trips and refusals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.coordinator.txn.records import TxnLogValue, decode_key, decode_value, encode_key, encode_value
from shared.errors import CorruptRecordError

# TransactionLogKey v0: version int16 0, TransactionalId string (int16 length + UTF-8)
KEY = bytes.fromhex("0000" "0004") + b"tx-1"

VALUE = TxnLogValue(producer_id=1000, producer_epoch=5, timeout_ms=60_000, status=1, partitions=(("t", (0, 2)),),
                    last_update_ms=2000, start_ms=1500)

# TransactionLogValue v0 (non-flexible)
VALUE_V0 = bytes.fromhex(
    "0000"  # version 0
    "00000000000003e8"  # ProducerId 1000
    "0005"  # ProducerEpoch 5
    "0000ea60"  # TransactionTimeoutMs 60000
    "01"  # TransactionStatus 1 (Ongoing)
    "00000001"  # TransactionPartitions: 1 entry
    "0001" "74"  # Topic "t"
    "00000002" "00000000" "00000002"  # PartitionIds [0, 2]
    "00000000000007d0"  # TransactionLastUpdateTimestampMs 2000
    "00000000000005dc"  # TransactionStartTimestampMs 1500
)

# TransactionLogValue v1 (flexible): compact arrays/strings, tagged fields at the end of each struct
VALUE_V1 = bytes.fromhex(
    "0001"  # version 1
    "00000000000003e8" "0005" "0000ea60" "01"
    "02"  # TransactionPartitions: compact array, 1 entry (length + 1)
    "02" "74"  # Topic "t": compact string (length + 1)
    "03" "00000000" "00000002"  # PartitionIds: compact array of 2
    "00"  # entry's tagged fields: none
    "00000000000007d0" "00000000000005dc"
    "02"  # 2 tagged fields
    "00" "08" "0000000000000007"  # tag 0 PreviousProducerId = 7 (8 bytes)
    "02" "02" "0002"  # tag 2 ClientTransactionVersion = 2 (2 bytes)
)
VALUE_V1_FIELDS = TxnLogValue(1000, 5, 60_000, 1, (("t", (0, 2)),), 2000, 1500, previous_producer_id=7,
                              client_version=2)

# Empty state: null partitions, every tagged field at its default (none written)
EMPTY_V1 = bytes.fromhex("0001" "0000000000000009" "0000" "000003e8" "00" "00" "0000000000000064"
                         "ffffffffffffffff" "00")
EMPTY_V0 = bytes.fromhex("0000" "0000000000000009" "0000" "000003e8" "00" "ffffffff" "0000000000000064"
                         "ffffffffffffffff")
EMPTY = TxnLogValue(9, 0, 1000, 0, None, 100, -1)


def test_key_layout() -> None:
    assert encode_key("tx-1") == KEY
    assert decode_key(KEY) == "tx-1"
    assert encode_key("é") == bytes.fromhex("0000" "0002" "c3a9")  # length in bytes of UTF-8


def test_key_of_unknown_version_is_skipped() -> None:
    assert decode_key(bytes.fromhex("0001" "0001") + b"x") is None


@pytest.mark.parametrize(("version", "raw", "value"), [(0, VALUE_V0, VALUE), (1, VALUE_V1, VALUE_V1_FIELDS),
                                                       (0, EMPTY_V0, EMPTY), (1, EMPTY_V1, EMPTY)])
def test_value_layouts(version: int, raw: bytes, value: TxnLogValue) -> None:
    assert encode_value(value, version) == raw
    assert decode_value(raw) == value


def test_next_producer_id_is_tag_1() -> None:
    v = TxnLogValue(1, 32767, 1000, 2, (), 5, 4, next_producer_id=0x0102)
    raw = encode_value(v)
    assert raw.endswith(bytes.fromhex("01" "01" "08" "0000000000000102"))
    assert raw[:-11].endswith(bytes.fromhex("01" "0000000000000005" "0000000000000004"))  # empty compact array
    assert decode_value(raw) == v


def test_tombstone() -> None:
    assert decode_value(None) is None


def test_v0_cannot_carry_tagged_fields() -> None:
    with pytest.raises(ValueError):
        encode_value(VALUE_V1_FIELDS, 0)


def test_unknown_tagged_fields_are_skipped() -> None:
    raw = VALUE_V1[:-15] + bytes.fromhex("03" "00" "08" "0000000000000007" "02" "02" "0002" "05" "01" "ff")
    assert decode_value(raw) == VALUE_V1_FIELDS


@pytest.mark.parametrize("raw", [VALUE_V0, VALUE_V1, EMPTY_V0, EMPTY_V1])
def test_every_truncation_is_refused(raw: bytes) -> None:
    for n in range(len(raw)):
        with pytest.raises(CorruptRecordError):
            decode_value(raw[:n])


def test_truncated_key_is_refused() -> None:
    for n in range(len(KEY)):
        with pytest.raises(CorruptRecordError):
            decode_key(KEY[:n])


@pytest.mark.parametrize(("raw", "why"), [
    (bytes.fromhex("0002") + VALUE_V1[2:], "unknown version 2"),
    (VALUE_V1 + b"\x00", "bytes after the end"),
    (VALUE_V0[:17] + bytes.fromhex("fffffffe") + VALUE_V0[21:], "bad TransactionPartitions count"),
    (VALUE_V1[:-15] + bytes.fromhex("02" "02" "02" "0002" "00" "08" "0000000000000007"), "must ascend"),
    (VALUE_V1[:-15] + bytes.fromhex("01" "02" "04" "00000002"), "expected 2"),
    (VALUE_V1[:17] + bytes.fromhex("ffffffff0f") + VALUE_V1[18:], "longer than the record"),
    (VALUE_V0[:21] + bytes.fromhex("0001ff") + VALUE_V0[24:], "not UTF-8"),
])
def test_garbage_is_refused_with_a_reason(raw: bytes, why: str) -> None:
    with pytest.raises(CorruptRecordError, match=why):
        decode_value(raw)


def test_key_with_trailing_bytes_is_refused() -> None:
    with pytest.raises(CorruptRecordError, match="after the end"):
        decode_key(KEY + b"!")


_partitions = st.lists(st.tuples(st.text(max_size=20), st.lists(st.integers(0, 2**31 - 1), max_size=5).map(tuple)),
                       max_size=4).map(tuple)
_values = st.builds(
    TxnLogValue,
    producer_id=st.integers(-(2**63), 2**63 - 1), producer_epoch=st.integers(-(2**15), 2**15 - 1),
    timeout_ms=st.integers(-(2**31), 2**31 - 1), status=st.integers(0, 7), partitions=st.none() | _partitions,
    last_update_ms=st.integers(-(2**63), 2**63 - 1), start_ms=st.integers(-(2**63), 2**63 - 1),
    previous_producer_id=st.integers(-(2**63), 2**63 - 1), next_producer_id=st.integers(-(2**63), 2**63 - 1),
    client_version=st.integers(-(2**15), 2**15 - 1))


@given(_values)
def test_v1_round_trip(v: TxnLogValue) -> None:
    assert decode_value(encode_value(v)) == v


@given(_values)
def test_v0_round_trip(v: TxnLogValue) -> None:
    v = TxnLogValue(v.producer_id, v.producer_epoch, v.timeout_ms, v.status, v.partitions, v.last_update_ms,
                    v.start_ms)
    assert decode_value(encode_value(v, 0)) == v


@given(st.text(max_size=100))
def test_key_round_trip(txn_id: str) -> None:
    assert decode_key(encode_key(txn_id)) == txn_id


@given(st.binary(max_size=80))
def test_random_bytes_decode_or_refuse(raw: bytes) -> None:
    try:
        decode_value(raw)
    except CorruptRecordError:
        pass
