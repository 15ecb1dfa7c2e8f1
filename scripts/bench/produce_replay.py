"""Replay one pre-encoded ProduceRequest (RECORDS x RECORD_SIZE bytes, one batch) N times on one
ProduceStream, IN_FLIGHT outstanding: a client that costs almost nothing, so the broker's CPU per
request is what differs between two broker builds (the bench producer's own speed does not).

    python scripts/bench/produce_replay.py BROKER_ADDRESS TOPIC N [--in-flight 5] [--client-id replay]
        [--kafka HOST:PORT]

With ``--kafka`` the same batch goes to the broker's Kafka listener instead, as a Produce v8 request on a
plain socket (acks=1), so the two doors' costs per record can be compared.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator

import grpc

from shared.proto import tidelog_pb2 as pb
from shared.records.builder import BatchBuilder


def request(topic: str, client_id: str, records: int, record_size: int) -> bytes:
    b = BatchBuilder()
    now = int(time.time() * 1000)
    for _ in range(records):
        b.append(os.urandom(record_size), os.urandom(16), now)
    data = pb.ProducePartitionData(partition=0, records=b.build())
    return pb.ProduceRequest(acks=1, timeout_ms=30_000, client_id=client_id, correlation_id=1,
                             topics=[pb.ProduceTopicData(name=topic, partitions=[data])]).SerializeToString()


def kafka_request(topic: str, client_id: str, records: int, record_size: int) -> tuple[bytes, bytes]:
    """A Produce v8 request (header v1) without its size and correlation id: (head, body)."""
    b = BatchBuilder()
    now = int(time.time() * 1000)
    for _ in range(records):
        b.append(os.urandom(record_size), os.urandom(16), now)
    batch = b.build()
    cid, name = client_id.encode(), topic.encode()
    body = (struct.pack(">hhi", -1, 1, 30_000) + struct.pack(">ih", 1, len(name)) + name
            + struct.pack(">iii", 1, 0, len(batch)) + batch)
    return struct.pack(">hh", 0, 8), struct.pack(">h", len(cid)) + cid + body


def run_kafka(addr: str, head: bytes, rest: bytes, n: int, in_flight: int) -> int:
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    slots = threading.Semaphore(in_flight)
    errors = [0]

    def reader() -> None:
        f = sock.makefile("rb")
        for _ in range(n):
            size = struct.unpack(">i", f.read(4))[0]
            resp = f.read(size)
            # correlation id, 1 topic, name, 1 partition, index, error code
            (name_len,) = struct.unpack_from(">h", resp, 8)
            (code,) = struct.unpack_from(">h", resp, 10 + name_len + 8)
            errors[0] += code != 0
            slots.release()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    size = len(head) + 4 + len(rest)
    for i in range(n):
        slots.acquire()
        sock.sendall(struct.pack(">i", size) + head + struct.pack(">i", i) + rest)
    t.join()
    sock.close()
    return errors[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("address")
    ap.add_argument("topic")
    ap.add_argument("n", type=int)
    ap.add_argument("--in-flight", type=int, default=5)
    ap.add_argument("--client-id", default="replay")
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--kafka", metavar="HOST:PORT", help="send to this Kafka listener instead")
    args = ap.parse_args()
    if args.kafka:
        head, rest = kafka_request(args.topic, args.client_id, args.records, args.record_size)
        t0 = time.perf_counter()
        errors = run_kafka(args.kafka, head, rest, args.n, args.in_flight)
        elapsed = time.perf_counter() - t0
        print(f"{args.n} requests in {elapsed:.2f}s: {args.n * args.records / elapsed:.0f} records/s, "
              f"errors {errors}")
        return
    req = request(args.topic, args.client_id, args.records, args.record_size)
    channel = grpc.insecure_channel(args.address, options=[("grpc.max_send_message_length", 64 << 20),
                                                           ("grpc.max_receive_message_length", 64 << 20)])
    call = channel.stream_stream("/tidelog.v1.Broker/ProduceStream", request_serializer=None,
                                 response_deserializer=pb.ProduceResponse.FromString)
    slots = threading.Semaphore(args.in_flight)

    def requests() -> Iterator[bytes]:
        for _ in range(args.n):
            slots.acquire()
            yield req

    t0 = time.perf_counter()
    errors = 0
    for resp in call(requests()):
        slots.release()
        errors += sum(p.error_code != 0 for t in resp.topics for p in t.partitions)
    elapsed = time.perf_counter() - t0
    print(f"{args.n} requests in {elapsed:.2f}s: {args.n * args.records / elapsed:.0f} records/s, errors {errors}")


if __name__ == "__main__":
    main()
