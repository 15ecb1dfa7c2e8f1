"""The hand-written ProduceRequest encoder against the generated protobuf serialiser."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.proto import tidelog_pb2 as pb
from shared.proto.produce_wire import WireError, encode_produce_request, parse_produce_request, varint

int32 = st.integers(-(2**31), 2**31 - 1)
pieces = st.lists(st.binary(max_size=300), max_size=3)
partitions = st.lists(st.tuples(st.integers(0, 2**31 - 1), pieces), max_size=3)
topics = st.lists(st.tuples(st.text(max_size=20), partitions), max_size=3)


@settings(max_examples=300)
@given(int32, int32, st.text(max_size=20), st.integers(-(2**63), 2**63 - 1), topics)
def test_byte_for_byte_as_the_generated_serialiser(acks, timeout_ms, client_id, correlation_id, topics) -> None:
    ours = encode_produce_request(acks=acks, timeout_ms=timeout_ms, client_id=client_id,
                                  correlation_id=correlation_id, topics=topics)
    req = pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms, client_id=client_id, correlation_id=correlation_id)
    for name, parts in topics:
        t = req.topics.add(name=name)
        for partition, chunks in parts:
            t.partitions.add(partition=partition, records=b"".join(chunks))
    assert ours == req.SerializeToString()
    assert pb.ProduceRequest.FromString(ours) == req


def test_varint_matches_protobuf_for_edge_values() -> None:
    for n in (0, 1, 127, 128, 300, 2**31 - 1, -1, -(2**31), 2**63 - 1):
        msg = pb.ProduceRequest(correlation_id=n).SerializeToString()
        assert msg == (b"\x30" + varint(n) if n else b"")


@settings(max_examples=300)
@given(int32, int32, st.text(max_size=20), st.text(max_size=5), st.integers(-(2**63), 2**63 - 1), topics)
def test_the_broker_reads_what_the_generated_parser_reads(acks, timeout_ms, client_id, txn, correlation_id,
                                                          topics) -> None:
    req = pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms, client_id=client_id, transactional_id=txn,
                            correlation_id=correlation_id)
    for name, parts in topics:
        t = req.topics.add(name=name)
        for partition, chunks in parts:
            t.partitions.add(partition=partition, records=b"".join(chunks))
    view = parse_produce_request(req.SerializeToString())
    assert (view.acks, view.timeout_ms, view.client_id, view.transactional_id, view.correlation_id) == (
        acks, timeout_ms, client_id, txn, correlation_id)
    assert [(t.name, [(p.partition, bytes(p.records)) for p in t.partitions]) for t in view.topics] == [
        (t.name, [(p.partition, p.records) for p in t.partitions]) for t in req.topics]


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_a_garbled_request_only_ever_raises_wire_error(data: bytes) -> None:
    try:
        parse_produce_request(data)
    except WireError:
        pass
