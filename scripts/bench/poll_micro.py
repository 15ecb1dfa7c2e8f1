"""µs per record of ``Consumer.poll`` / ``poll_arrow`` on pre-fetched data, in process (no broker, no network).

A fetched response's worth of record batches is built once with the record builder; each round hands
it to a consumer as a completed fetch (as the fetcher thread does) and polls until it is drained,
touching every record's value (``poll``) or taking the table (``poll_arrow``). So the figure is the
client's own decode and hand-out cost per record, which is what the per-record path can shave.
CPU time (``process_time``) is printed beside wall time: on a loaded machine it is the steadier one.

    python scripts/bench/poll_micro.py --value-size 100 --batch-records 1000
    python scripts/bench/poll_micro.py --mode arrow --value-size 1024
    python scripts/bench/poll_micro.py --headers          # every record with one header
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from shared.client import Consumer, TopicPartition
from shared.client import consumer as consumer_module
from shared.records.builder import BatchBuilder
from shared.records.compression import CompressionType
from shared.records.header import iter_batches

TP = TopicPartition("bench", 0)


def fetched(records: int, value_size: int, key_size: int, batch_records: int, headers: bool,
            compression: str) -> bytes:
    values = [os.urandom(value_size) for _ in range(64)]
    out = []
    ts = int(time.time() * 1000)
    for base in range(0, records, batch_records):
        b = BatchBuilder(CompressionType.parse(compression))
        for i in range(base, min(base + batch_records, records)):
            b.append(values[i & 63], values[i & 63][:key_size] if key_size else None, ts,
                     [("h", b"x")] if headers else None)
        out.append(b.build(base))
    return b"".join(out)


def responses(data: bytes, fetch_bytes: int) -> list[bytes]:
    """``data`` cut, at batch boundaries, into what fetches of ``fetch_bytes`` would return."""
    out = []
    start = 0
    for pos, h in iter_batches(data):
        if pos + h.size - start > fetch_bytes and pos > start:
            out.append((start, pos))
            start = pos
    out.append((start, len(data)))
    return [data[a:b] for a, b in out]


def one_round(c: Consumer, cuts: list[bytes], mode: str, max_poll_records: int) -> int:
    st = c._states[TP]
    st.position = 0
    c._current = None
    for buf in cuts:  # each response's own buffer, as the fetch stream hands them in
        c._completed.append(consumer_module.Completed(TP, st.generation, 0, buf, 0, len(buf), 10**12, 0))
    n = 0
    if mode == "arrow":
        while True:
            t = c.poll_arrow(0)
            if not t.num_rows:
                return n
            n += t.num_rows
    nbytes = 0
    while True:
        recs = c.poll(0, max_poll_records)
        if not recs:
            return n
        for r in recs:
            nbytes += len(r.value)
        n += len(recs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["poll", "arrow"], default="poll")
    ap.add_argument("--records", type=int, default=100_000, help="records per round (one fetched buffer)")
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--key-size", type=int, default=16)
    ap.add_argument("--batch-records", type=int, default=1000, help="records per record batch")
    ap.add_argument("--max-poll-records", type=int, default=500)
    ap.add_argument("--headers", action="store_true")
    ap.add_argument("--compression", default="none")
    ap.add_argument("--fetch-bytes", type=int, default=1 << 20, help="bytes per fetched response (max.partition.fetch.bytes)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--profile", action="store_true", help="cProfile one round (top 15 by total time)")
    a = ap.parse_args()
    data = fetched(a.records, a.value_size, a.key_size, a.batch_records, a.headers, a.compression)
    cuts = responses(data, a.fetch_bytes)
    c = Consumer("127.0.0.1:1")  # never dials: no partition is assigned, so no fetcher thread
    st = consumer_module.PartitionState()
    c._states = {TP: st}
    try:
        one_round(c, cuts, a.mode, a.max_poll_records)  # warm up (imports, Arrow kernels)
        if a.profile:
            import cProfile
            import pstats
            prof = cProfile.Profile()
            prof.runcall(one_round, c, cuts, a.mode, a.max_poll_records)
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)
        us, cpu_us = [], []
        for _ in range(a.rounds):
            t0, c0 = time.perf_counter(), time.process_time()
            n = one_round(c, cuts, a.mode, a.max_poll_records)
            us.append((time.perf_counter() - t0) * 1e6 / n)
            cpu_us.append((time.process_time() - c0) * 1e6 / n)
    finally:
        c._closed = True
        c.cluster.close()
    print(f"{a.mode}: {a.records} records of {a.value_size} B ({a.batch_records}/batch, "
          f"headers={a.headers}, compression={a.compression}): "
          f"CPU median {statistics.median(cpu_us):.3f} µs/record, best {min(cpu_us):.3f}; "
          f"wall median {statistics.median(us):.3f} µs/record, best {min(us):.3f} = {1e6 / min(us):,.0f} records/s")


if __name__ == "__main__":
    main()
