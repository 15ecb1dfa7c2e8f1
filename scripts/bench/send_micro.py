"""Micro-benchmark of ``Producer.send`` (and ``send_batch``) in-process, the sender stubbed out.

No cluster: the producer's sender thread is not started and the topic's partition count is set by hand,
so what is timed is the application thread's work per record: checks, partitioner, accumulator append,
record encoding, future. Timed in thread CPU time (``time.thread_time``), so that the figures hold on
a machine busy with other work. The accumulator is emptied every ``--drain`` records (outside the timing),
standing in for the sender.

    python scripts/bench/send_micro.py --records 500000 --value-size 100 --key-size 16
    python scripts/bench/send_micro.py --columnar --records 2000000 --value-size 100
"""

from __future__ import annotations

import argparse
import os
import time

from shared.client.producer import Producer
from shared.client.sender import Sender


def stub_producer(topic: str, partitions: int, **kw: object) -> Producer:
    """A producer whose sender never runs and whose topic metadata is given (no network)."""
    start = Sender.start
    Sender.start = lambda self: None  # type: ignore[method-assign]
    try:
        p = Producer("127.0.0.1:1", acks=1, buffer_memory=1 << 40, **kw)  # type: ignore[arg-type]
    finally:
        Sender.start = start  # type: ignore[method-assign]
    p._partition_counts[topic] = partitions
    return p


def drain(p: Producer) -> None:
    acc = p.accumulator
    with acc.lock:
        for dq in acc.batches.values():
            for b in dq:
                b.close()
        acc.batches.clear()
        acc.open.clear()
        acc.incomplete.clear()
        acc.buffered = 0


def bench_send(records: int, value_size: int, key_size: int, partitions: int, drain_every: int,
               use_futures: bool) -> float:
    topic = "micro"
    p = stub_producer(topic, partitions, batch_size=1 << 20)
    values = [os.urandom(value_size) for _ in range(256)]
    keys = [os.urandom(key_size) for _ in range(4096)] if key_size else [None] * 4096
    send = p.send
    elapsed = 0.0
    done = 0
    keep = []
    while done < records:
        m = min(drain_every, records - done)
        t0 = time.thread_time()
        if use_futures:
            for i in range(m):
                keep.append(send(topic, values[i & 255], key=keys[i & 4095]))
        else:
            for i in range(m):
                send(topic, values[i & 255], key=keys[i & 4095])
        elapsed += time.thread_time() - t0
        keep.clear()
        drain(p)
        done += m
    p._closing = True
    p.cluster.close()
    return elapsed / records * 1e6


def bench_send_batch(records: int, value_size: int, key_size: int, partitions: int, chunk: int) -> float:
    import numpy as np
    import pyarrow as pa

    topic = "micro"
    p = stub_producer(topic, partitions, batch_size=1 << 20, max_request_size=8 << 20)
    rng = np.random.default_rng(0)
    vdata = rng.integers(0, 256, chunk * value_size, dtype=np.uint8)
    values = pa.Array.from_buffers(pa.large_binary(), chunk, [None, pa.py_buffer(
        np.arange(chunk + 1, dtype=np.int64) * value_size), pa.py_buffer(vdata)])
    keys = None
    if key_size:
        kdata = rng.integers(0, 256, chunk * key_size, dtype=np.uint8)
        keys = pa.Array.from_buffers(pa.large_binary(), chunk, [None, pa.py_buffer(
            np.arange(chunk + 1, dtype=np.int64) * key_size), pa.py_buffer(kdata)])
    elapsed = 0.0
    done = 0
    while done < records:
        t0 = time.thread_time()
        p.send_batch(topic, values, keys=keys)
        elapsed += time.thread_time() - t0
        drain(p)
        done += chunk
    p._closing = True
    p.cluster.close()
    return elapsed / done * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--key-size", type=int, default=16)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--drain", type=int, default=50_000, help="records between drains (untimed)")
    ap.add_argument("--keep-futures", action="store_true", help="keep every future (as a caller that uses them)")
    ap.add_argument("--columnar", action="store_true", help="time send_batch instead, --drain rows per call")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    runs = []
    for _ in range(a.repeat):
        if a.columnar:
            runs.append(bench_send_batch(a.records, a.value_size, a.key_size, a.partitions, a.drain))
        else:
            runs.append(bench_send(a.records, a.value_size, a.key_size, a.partitions, a.drain, a.keep_futures))
    what = "send_batch" if a.columnar else "send"
    print(f"{what}: {min(runs):.3f} µs/record best of {a.repeat} (runs: {', '.join(f'{r:.3f}' for r in runs)}); "
          f"value {a.value_size} B, key {a.key_size} B, {a.partitions} partition(s)")


if __name__ == "__main__":
    main()
