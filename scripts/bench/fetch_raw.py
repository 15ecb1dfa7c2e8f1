"""The consumer's floor on the gRPC door: the client CPU that receiving fetch responses costs, with no
decoding at all. Reads partition 0 of TOPIC again and again in 1 MiB fetches and prints MB/s and the
process's CPU per MiB received, for one of these ways of calling the broker:

  stream  FetchStream as the consumer uses it (PipelinedFetchStream: four requests in flight, a thread
          per direction in grpcio)
  unary   blocking Fetch calls, one at a time (no pipelining, no stream threads)
  aio     FetchStream through grpc.aio on one event loop, four in flight
  kafka   the broker's Kafka listener as the consumer's default transport uses it (KafkaFetchStream:
          Kafka's Fetch v11 on a plain socket, one in flight, each at the exact next offset)
  kafka-one, kafka-two
          partitions 0 and 1 over the Kafka listener: one request for both at a time, or one request
          for each, both in flight (as the consumer splits partitions that keep returning records)

    python scripts/bench/fetch_raw.py --data-dir /tmp/bt --topic t --mode stream|kafka --mib 1500

The topic must hold records already (``tidelog bench produce``); a 1 KiB record is ~1/1000 of a MiB, so
µs per MiB / 1000 is the gRPC receive cost per 1 KiB record.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import grpc

from shared.cli.bench_kafka import kafka_bootstrap
from shared.cli.connect import bootstrap_servers
from shared.client.cluster import CHANNEL_OPTIONS, BrokerClientStub
from shared.client.fetch_stream import PipelinedFetchStream, fetch_request
from shared.client.kafka_fetch import KafkaFetchResponse, KafkaFetchStream
from shared.proto import tidelog_pb2 as pb
from shared.proto.fetch_wire import FetchPartitionView, parse_fetch_response
from shared.types import TopicPartition

DEPTH = 4
STEP = 990  # 1 KiB records per 1 MiB fetch, about: pipelined requests are sent at offsets guessed ahead


def request(tp: TopicPartition, offset: int) -> pb.FetchRequest:
    return fetch_request([(tp, offset)], max_wait_ms=0, min_bytes=1, max_bytes=64 << 20,
                         partition_max_bytes=1 << 20, incremental=False)


def first_partition(resp: object) -> FetchPartitionView:
    return resp.topics[0].partitions[0]  # type: ignore[attr-defined, no-any-return]


def run_stream(addr: str, tp: TopicPartition, end: int, want: int) -> int:
    channel = grpc.insecure_channel(addr, options=CHANNEL_OPTIONS)
    stream: PipelinedFetchStream[int] = PipelinedFetchStream(BrokerClientStub(channel), 0)
    got, offset = 0, 0
    for _ in range(DEPTH):
        stream.send(request(tp, offset), offset)
        offset = (offset + STEP) % end
    while got < want:
        resp, _ = stream.receive()
        got += first_partition(resp).records_size
        stream.send(request(tp, offset), offset)
        offset = (offset + STEP) % end
    stream.close()
    channel.close()
    return got


def run_unary(addr: str, tp: TopicPartition, end: int, want: int) -> int:
    channel = grpc.insecure_channel(addr, options=CHANNEL_OPTIONS)
    fetch = channel.unary_unary("/tidelog.v1.Broker/Fetch", request_serializer=pb.FetchRequest.SerializeToString,
                                response_deserializer=parse_fetch_response)
    got, offset = 0, 0
    while got < want:
        p = first_partition(fetch(request(tp, offset)))
        got += p.records_size
        offset = p.next_offset if p.next_offset < end else 0
    channel.close()
    return got


async def run_aio(addr: str, tp: TopicPartition, end: int, want: int) -> int:
    channel = grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS)
    call = channel.stream_stream("/tidelog.v1.Broker/FetchStream", request_serializer=pb.FetchRequest.SerializeToString,
                                 response_deserializer=parse_fetch_response)()
    got, offset = 0, 0
    for _ in range(DEPTH):
        await call.write(request(tp, offset))
        offset = (offset + STEP) % end
    while got < want:
        got += first_partition(await call.read()).records_size
        await call.write(request(tp, offset))
        offset = (offset + STEP) % end
    call.cancel()
    await channel.close()
    return got


def run_kafka(addr: str, tp: TopicPartition, end: int, want: int) -> int:
    stream: KafkaFetchStream[None] = KafkaFetchStream(addr, 0, "fetch-raw", 10)
    stream.connect()
    got, offset = 0, 0
    while got < want:
        stream.fetch([(tp, offset)], None, max_wait_ms=0, min_bytes=1, max_bytes=64 << 20,
                     partition_max_bytes=1 << 20, isolation_level=0)
        resp, _ = stream.receive()
        p = resp.topics[0].partitions[0]
        got += p.records_size
        offset = p.next_offset if p.next_offset < end else 0
    stream.close()
    return got


def run_kafka_pair(addr: str, tps: list[TopicPartition], want: int, split: bool) -> int:
    """Partitions ``tps`` (two) in one request at a time, or (``split``) one request each, both in flight."""
    stream: KafkaFetchStream[TopicPartition | None] = KafkaFetchStream(addr, 0, "fetch-raw", 10)
    stream.connect()

    def fetch(parts: list[tuple[TopicPartition, int]], meta: TopicPartition | None) -> None:
        stream.fetch(parts, meta, max_wait_ms=0, min_bytes=1, max_bytes=64 << 20, partition_max_bytes=1 << 20,
                     isolation_level=0)

    fetch([(tp, 0) for tp in tps], None)
    resp, _ = stream.receive()
    ends = {TopicPartition(t.name, p.partition): p.high_watermark for t in resp.topics for p in t.partitions}
    pos = dict.fromkeys(tps, 0)
    got = 0

    def file(resp: KafkaFetchResponse) -> None:
        nonlocal got
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition)
                got += p.records_size
                pos[tp] = p.next_offset if p.next_offset < ends[tp] else 0

    if split:
        for tp in tps:
            fetch([(tp, 0)], tp)
        while got < want:
            resp, tp = stream.receive()
            file(resp)
            fetch([(tp, pos[tp])], tp)
    else:
        while got < want:
            fetch([(tp, pos[tp]) for tp in tps], None)
            resp, _ = stream.receive()
            file(resp)
    stream.close()
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True, help="a local cluster's data dir (cluster.json)")
    ap.add_argument("--topic", default="t")
    ap.add_argument("--mode", choices=("stream", "unary", "aio", "kafka", "kafka-one", "kafka-two"), default="stream")
    ap.add_argument("--mib", type=int, default=1500, help="MiB to receive")
    args = ap.parse_args()
    addr = bootstrap_servers(None, None, args.data_dir).split(",")[0]
    tp = TopicPartition(args.topic, 0)
    channel = grpc.insecure_channel(addr, options=CHANNEL_OPTIONS)
    end = first_partition(BrokerClientStub(channel).FetchStreamRaw(iter([request(tp, 0)])).next()).high_watermark
    channel.close()
    if end < DEPTH * STEP:
        raise SystemExit(f"{args.topic}-0 holds {end} records: produce at least {DEPTH * STEP} first")
    want = args.mib << 20
    c0, t0 = time.process_time(), time.perf_counter()
    if args.mode == "stream":
        got = run_stream(addr, tp, end, want)
    elif args.mode == "unary":
        got = run_unary(addr, tp, end, want)
    elif args.mode == "kafka":
        got = run_kafka(kafka_bootstrap(None, args.data_dir).split(",")[0], tp, end, want)
    elif args.mode in ("kafka-one", "kafka-two"):
        got = run_kafka_pair(kafka_bootstrap(None, args.data_dir).split(",")[0],
                             [tp, TopicPartition(args.topic, 1)], want, args.mode == "kafka-two")
    else:
        got = asyncio.run(run_aio(addr, tp, end, want))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"{args.mode}: {got / elapsed / 1e6:,.0f} MB/s, client CPU {cpu / (got / 2**20) * 1e6:,.0f} µs per MiB "
          f"({cpu / elapsed:.2f} cores)")


if __name__ == "__main__":
    main()
