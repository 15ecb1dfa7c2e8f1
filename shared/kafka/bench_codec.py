"""``python -m shared.kafka.bench_codec``: what decoding a Produce request and encoding a Fetch response
cost with kio (what the Kafka listener uses) and with kafka-python 3's schema-generated protocol (the
alternative the issue named), on this machine. Prints µs per message for each."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from shared.kafka.messages import api, build, encode_response

PRODUCE, FETCH = 0, 1


def _time(fn: Callable[[], Any], n: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def _produce_request_frame(batch: bytes, partitions: int) -> bytes:
    """A whole Produce v9 request frame (header + body), as a client sends it, written with kio."""
    import datetime
    import importlib

    from kio.serial import entity_writer
    from kio.static.primitive import i32Timedelta

    a = api(PRODUCE, 9)
    mod = importlib.import_module(a.request.__module__)
    body = a.request(transactional_id=None, acks=1, timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                     topic_data=(mod.TopicProduceData(name="t", partition_data=tuple(
                         mod.PartitionProduceData(index=p, records=batch) for p in range(partitions))),))
    chunks: list[bytes] = []

    class Buffer:
        write = chunks.append

    header = a.request.__header_schema__(request_api_key=PRODUCE, request_api_version=9, correlation_id=1,
                                         client_id="bench")
    entity_writer(a.request.__header_schema__)(Buffer, header)  # type: ignore[arg-type]
    entity_writer(a.request)(Buffer, body)  # type: ignore[arg-type]
    return b"".join(chunks)


def kio_figures(n: int = 20_000) -> dict[str, float]:
    from shared.kafka.messages import read_request

    a = api(PRODUCE, 9)
    one = _produce_request_frame(b"z" * 16384, 1)
    four = _produce_request_frame(b"x" * 65536, 4)
    f = api(FETCH, 13)
    records = b"y" * (1 << 20)
    response = build(f.response, {"responses": [{"topic_id": uuid.uuid4(), "partitions": [
        {"partition_index": p, "high_watermark": 100, "last_stable_offset": 100, "records": records}
        for p in range(4)]}]})
    return {
        "decode produce 1 x 16 KiB": _time(lambda: read_request(one, a), n),
        "decode produce 4 x 64 KiB": _time(lambda: read_request(four, a), n),
        "encode fetch 4 x 1 MiB (chunks, batches not copied)": _time(lambda: encode_response(f, 1, response), n // 10),
    }


def kafka_python_figures(n: int = 20_000) -> dict[str, float]:
    from kafka.protocol.consumer import FetchResponse
    from kafka.protocol.producer.produce import ProduceRequest

    r = ProduceRequest[9]
    part = r.TopicProduceData.PartitionProduceData

    def request(batch: bytes, partitions: int) -> bytes:
        return bytes(r(transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[r.TopicProduceData(
            name="t", partition_data=[part(index=p, records=batch) for p in range(partitions)])]).encode())

    one, four = request(b"z" * 16384, 1), request(b"x" * 65536, 4)
    fr = FetchResponse[13]
    records = b"y" * (1 << 20)
    response = fr(throttle_time_ms=0, error_code=0, session_id=0, responses=[fr.FetchableTopicResponse(
        topic_id=uuid.uuid4(), partitions=[fr.FetchableTopicResponse.PartitionData(
            partition_index=p, error_code=0, high_watermark=100, last_stable_offset=100, log_start_offset=0,
            aborted_transactions=None, preferred_read_replica=-1, records=records) for p in range(4)])])
    return {
        "decode produce 1 x 16 KiB": _time(lambda: r.decode(one), n),
        "decode produce 4 x 64 KiB": _time(lambda: r.decode(four), n),
        "encode fetch 4 x 1 MiB (chunks, batches not copied)": _time(response.encode, n // 10),
    }


def main() -> None:
    kio = kio_figures()
    try:
        other = kafka_python_figures()
    except ImportError:
        other = {}
    print(f"{'':52} {'kio µs':>10} {'kafka-python µs':>16}")
    for name, v in kio.items():
        o = other.get(name)
        print(f"{name:52} {v:10.1f} {o:16.1f}" if o is not None else f"{name:52} {v:10.1f} {'-':>16}")


if __name__ == "__main__":
    main()
