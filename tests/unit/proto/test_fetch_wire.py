"""The hand-written FetchResponse reader against the generated protobuf parser."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.proto import tidelog_pb2 as pb
from shared.proto.fetch_wire import FetchPartitionData, WireError, encode_fetch_response, parse_fetch_response

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
partition = st.fixed_dictionaries({
    "partition": int32, "error_code": int32, "error_message": st.text(max_size=10), "high_watermark": int64,
    "last_stable_offset": int64, "log_start_offset": int64, "log_end_offset": int64, "leader_epoch": int32,
    "records": st.binary(max_size=300), "fetch_offset": int64, "next_offset": int64,
    "aborted_transactions": st.lists(st.tuples(int64, int64), max_size=3),
})
topic = st.tuples(st.text(max_size=12), st.lists(partition, max_size=3))
PARTITION_FIELDS = [f.name for f in pb.FetchPartitionResponse.DESCRIPTOR.fields]


@settings(max_examples=300)
@given(int32, int32, int64, st.lists(topic, max_size=3), int32)
def test_every_field_as_the_generated_parser_reads_it(throttle, error, correlation, topics, session) -> None:
    msg = pb.FetchResponse(throttle_time_ms=throttle, error_code=error, correlation_id=correlation, session_id=session)
    for name, parts in topics:
        t = msg.topics.add(name=name)
        for p in parts:
            _add(t, p)
    raw = msg.SerializeToString()
    ours = parse_fetch_response(raw)
    assert (ours.throttle_time_ms, ours.error_code, ours.correlation_id, ours.session_id) == (
        throttle, error, correlation, session)
    assert [t.name for t in ours.topics] == [t.name for t in msg.topics]
    for mine, theirs in zip(ours.topics, msg.topics, strict=True):
        assert len(mine.partitions) == len(theirs.partitions)
        for a, b in zip(mine.partitions, theirs.partitions, strict=True):
            assert {f: _plain(getattr(a, f)) for f in PARTITION_FIELDS} == {
                f: _plain(getattr(b, f)) for f in PARTITION_FIELDS}
            assert raw[a.records_start:a.records_end] == b.records and a.records_size == len(b.records)


def _add(topic: pb.FetchTopicResponse, p: dict) -> None:
    aborted = [pb.AbortedTransaction(producer_id=pid, first_offset=first) for pid, first in p["aborted_transactions"]]
    topic.partitions.add(**{**p, "aborted_transactions": aborted})


def _plain(v: object) -> object:
    """A repeated AbortedTransaction field as the view's (producer_id, first_offset) list."""
    if isinstance(v, list) or hasattr(v, "add"):
        return [x if isinstance(x, tuple) else (x.producer_id, x.first_offset) for x in v]  # type: ignore[attr-defined]
    return v


def test_all_fields_of_the_proto_are_known() -> None:
    assert set(PARTITION_FIELDS) == {"partition", "error_code", "error_message", "high_watermark",
                                     "last_stable_offset", "log_start_offset", "log_end_offset", "leader_epoch",
                                     "records", "fetch_offset", "next_offset", "aborted_transactions"}
    assert {f.name for f in pb.FetchResponse.DESCRIPTOR.fields} == {"throttle_time_ms", "error_code", "topics",
                                                                    "correlation_id", "session_id"}


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_garbage_only_ever_raises_wire_error(data: bytes) -> None:
    try:
        parse_fetch_response(data)
    except (WireError, UnicodeDecodeError):
        pass


def test_a_truncated_response_is_a_wire_error() -> None:
    msg = pb.FetchResponse(topics=[pb.FetchTopicResponse(name="t", partitions=[
        pb.FetchPartitionResponse(partition=1, records=b"x" * 100)])])
    raw = msg.SerializeToString()
    for cut in (5, len(raw) - 1):
        with pytest.raises(WireError):
            parse_fetch_response(raw[:cut])


@settings(max_examples=300)
@given(int32, int32, int64, st.lists(topic, max_size=3), st.booleans(), int32)
def test_the_broker_writes_byte_for_byte_what_the_generated_serialiser_writes(throttle, error, correlation, topics,
                                                                             as_views, session) -> None:
    msg = pb.FetchResponse(throttle_time_ms=throttle, error_code=error, correlation_id=correlation, session_id=session)
    ours_topics = []
    for name, parts in topics:
        t = msg.topics.add(name=name)
        mine = []
        for p in parts:
            _add(t, p)
            records = memoryview(b"__" + p["records"])[2:] if as_views else p["records"]
            mine.append(FetchPartitionData(**{**p, "records": records}))
        ours_topics.append((name, mine))
    ours = encode_fetch_response(correlation_id=correlation, topics=ours_topics, throttle_time_ms=throttle,
                                 error_code=error, session_id=session)
    assert ours == msg.SerializeToString()
