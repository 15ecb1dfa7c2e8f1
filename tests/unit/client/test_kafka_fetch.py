"""The consumer's Kafka-wire fetch (shared.client.kafka_fetch), checked against kio's Kafka codec: the
request as the broker's Kafka door reads it, the response as that door writes it."""

from __future__ import annotations

import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.client.kafka_fetch import KafkaFetchError, KafkaFetchStream, encode_fetch, parse_fetch
from shared.errors import ErrorCode
from shared.kafka.messages import api, build, encode_response, read_request
from shared.records.builder import encode_batch
from shared.types import TopicPartition

FETCH_V11 = api(1, 11)


def _batch(base: int, n: int, size: int = 10) -> bytes:
    return encode_batch([(1000 + i, None, b"v" * size, ()) for i in range(n)], base_offset=base)


def _response(corr: int, topics: list[tuple[str, list[dict[str, object]]]], throttle: int = 0) -> bytes:
    body = build(FETCH_V11.response, throttle_time=throttle, error_code=0, session_id=0,
                 responses=[{"topic": name, "partitions": parts} for name, parts in topics])
    frame = b"".join(encode_response(FETCH_V11, corr, body))
    return frame[4:]  # without the size prefix, as the stream reads it


def _part(p: int, records: bytes | None, error: int = 0, hw: int = 100, aborted: list[tuple[int, int]] | None = None,
          ) -> dict[str, object]:
    return {"partition_index": p, "error_code": error, "high_watermark": hw, "last_stable_offset": hw,
            "log_start_offset": 3, "preferred_read_replica": -1, "records": records,
            "aborted_transactions": None if aborted is None else
            [{"producer_id": pid, "first_offset": first} for pid, first in aborted]}


def test_request_reads_back_as_kafka_fetch_v11() -> None:
    parts = [(TopicPartition("a", 0), 5), (TopicPartition("b", 2), 7), (TopicPartition("a", 1), 9)]
    frame = encode_fetch(42, b"cid", parts, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20,
                         partition_max_bytes=4096, isolation_level=1)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    req = read_request(frame[4:], FETCH_V11)
    assert (req.correlation_id, req.client_id) == (42, "cid")
    body = req.body
    assert body.replica_id == -1 and body.min_bytes == 1 and body.max_bytes == 1 << 20
    assert body.max_wait.total_seconds() == 0.5 and int(body.isolation_level) == 1
    assert (body.session_id, body.session_epoch) == (0, -1)  # sessionless
    got = [(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch)
           for t in body.topics for p in t.partitions]
    assert got == [("a", 0, 5, 4096, -1), ("a", 1, 9, 4096, -1), ("b", 2, 7, 4096, -1)]
    assert list(body.forgotten_topics_data) == [] and body.rack_id == ""


def test_response_parsed_in_place() -> None:
    b1, b2 = _batch(10, 3), _batch(13, 2)
    partial = _batch(15, 4)[:30]  # the read ended inside the next batch
    buf = _response(7, [("t", [_part(0, b1 + b2 + partial, aborted=[(9, 11)]), _part(1, None, error=1)]),
                        ("u", [_part(4, b"")])], throttle=25)
    offsets = {TopicPartition("t", 0): 10, TopicPartition("t", 1): 0, TopicPartition("u", 4): 8}
    resp = parse_fetch(buf, 7, offsets)
    assert resp.throttle_time_ms == 25 and resp.error_code == 0
    assert [t.name for t in resp.topics] == ["t", "u"]
    p0, p1 = resp.topics[0].partitions
    assert bytes(p0.buf[p0.records_start:p0.records_end]) == b1 + b2  # whole batches only
    assert p0.buf is buf  # not copied
    assert (p0.fetch_offset, p0.next_offset, p0.high_watermark, p0.log_start_offset) == (10, 15, 100, 3)
    assert p0.aborted_transactions == [(9, 11)] and p0.error_code == 0
    assert (p1.error_code, p1.records_size, p1.next_offset) == (ErrorCode.OFFSET_OUT_OF_RANGE, 0, 0)
    (p4,) = resp.topics[1].partitions
    assert (p4.partition, p4.records_size, p4.next_offset, p4.fetch_offset) == (4, 0, 8, 8)


def test_no_whole_batch_is_record_too_large() -> None:
    buf = _response(1, [("t", [_part(0, _batch(0, 50)[:40])])])
    (p,) = parse_fetch(buf, 1, {TopicPartition("t", 0): 0}).topics[0].partitions
    assert p.error_code == ErrorCode.MESSAGE_TOO_LARGE and p.records_size == 0 and "no whole record batch" in p.error_message


def test_wrong_correlation_or_truncated_frame_is_refused() -> None:
    buf = _response(3, [("t", [_part(0, _batch(0, 2))])])
    with pytest.raises(KafkaFetchError, match="correlation id 3"):
        parse_fetch(buf, 4, {})
    for cut in (2, 20, len(buf) - 5):
        with pytest.raises(KafkaFetchError):
            parse_fetch(buf[:cut], 3, {})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 6)), min_size=0, max_size=5), st.integers(0, 200))
def test_next_offset_after_whole_batches(batches: list[tuple[int, int]], cut: int) -> None:
    data, base, ends = b"", 0, []
    for gap, n in batches:
        base += gap  # compacted-away offsets between batches
        data += _batch(base, n)
        base += n
        ends.append((len(data), base))
    records = data[:max(0, len(data) - cut)]
    buf = _response(1, [("t", [_part(0, records)])])
    (p,) = parse_fetch(buf, 1, {TopicPartition("t", 0): 0}).topics[0].partitions
    whole = [(end, nxt) for end, nxt in ends if end <= len(records)]
    if whole:
        assert (p.records_size, p.next_offset) == whole[-1]
    elif records:
        assert p.error_code == ErrorCode.MESSAGE_TOO_LARGE
    else:
        assert (p.records_size, p.next_offset, p.error_code) == (0, 0, 0)


def _serve(replies: list[bytes]) -> tuple[str, threading.Thread]:
    """A socket on 127.0.0.1 that reads one request per reply and writes the reply, then closes."""
    srv = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        conn, _ = srv.accept()
        with conn, srv:
            for reply in replies:
                size = int.from_bytes(conn.recv(4, socket.MSG_WAITALL), "big")
                conn.recv(size, socket.MSG_WAITALL)
                conn.sendall(reply)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return f"127.0.0.1:{srv.getsockname()[1]}", t


def test_stream_counts_a_response_in_flight_until_filed() -> None:
    reply = _response(1, [("t", [_part(0, _batch(5, 3))])])
    address, t = _serve([len(reply).to_bytes(4, "big") + reply])
    stream: KafkaFetchStream[str] = KafkaFetchStream(address, 1, "c", 5)
    tp = TopicPartition("t", 0)
    stream.fetch([(tp, 5)], "meta", max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, partition_max_bytes=1 << 20,
                 isolation_level=0)  # before connect: waits in the stream
    stream.connect()
    resp, meta = stream.receive()
    assert meta == "meta" and stream.answered
    (p,) = resp.topics[0].partitions
    assert (p.fetch_offset, p.next_offset) == (5, 8)
    assert stream.in_flight == 1  # received, not yet filed: no fetch may leave at the old positions
    stream.done()
    assert stream.in_flight == 0
    with pytest.raises(KafkaFetchError, match="closed the connection"):
        stream.receive()  # the server is gone
    stream.close()
    t.join(5)


def test_stream_refuses_an_oversized_frame_and_a_silent_close() -> None:
    address, t = _serve([(1 << 30).to_bytes(4, "big")])
    stream: KafkaFetchStream[None] = KafkaFetchStream(address, 1, "c", 5)
    stream.connect()
    stream.fetch([(TopicPartition("t", 0), 0)], None, max_wait_ms=0, min_bytes=1, max_bytes=1024,
                 partition_max_bytes=1024, isolation_level=0)
    with pytest.raises(KafkaFetchError, match="frame of 1073741824 bytes"):
        stream.receive()
    assert not stream.answered
    stream.close()
    t.join(5)
    address, t = _serve([])  # accepts, then closes without a word
    stream = KafkaFetchStream(address, 1, "c", 5)
    stream.connect()
    with pytest.raises(KafkaFetchError):
        stream.receive()
    assert not stream.answered
    stream.close()
    t.join(5)
