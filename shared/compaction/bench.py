"""``tidelog bench compact``: how fast cleaner workers clean, with 1 and more worker processes.

Generates compacted-topic logs in memory (16-byte keys drawn from ``distinct_keys`` keys over
all logs, values of ``value_size`` bytes, batches of ``batch_records``, segments of
``segment_bytes``), one log per partition, then cleans every log with a pool of 1, 2, ...
worker processes, each running the cleaning core on whole logs: what a worker does with a
job once its segments are in memory, without the gRPC transfer and without the broker. The
figures:

* MB/s of log cleaned per pool size, per worker, and the speed-up over one worker;
* the broker's check of a result (``verify_result``, which replays the decisions on the
  original segments) in MB/s on one core, measured in the one-worker pass (and not counted
  in its cleaning time): every result passes it before a swap, on the broker that holds
  the log;
* the offset map's bytes per key, measured on a map filled to its load factor.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from dataclasses import asdict, dataclass

import numpy as np

from shared.compaction.cleaning import CleanJob, SegmentData, clean
from shared.compaction.offset_map import OffsetMap
from shared.compaction.verify import verify_result
from shared.records.builder import encode_batch_columns

T0 = 1_700_000_000_000


@dataclass(frozen=True)
class CompactBench:
    log_bytes: int
    partitions: int
    records: int
    distinct_keys: int
    value_size: int
    mb_per_s: dict[int, float]  # workers -> MB/s of log cleaned
    mb_per_s_per_worker: dict[int, float]
    speedup: dict[int, float]
    kept_fraction: float
    verify_mb_per_s: float  # the broker's check of the results, one core
    map_bytes_per_key: float  # measured on a full offset map
    map_load_factor: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def make_log(seed: int, records: int, keys: int, value_size: int, batch_records: int, segment_bytes: int
             ) -> tuple[SegmentData, ...]:
    rng = random.Random(seed)
    value = b"v" * value_size
    segs: list[SegmentData] = []
    data = bytearray()
    base = off = 0
    while off < records:
        n = min(batch_records, records - off)
        stamps = range(T0 + off, T0 + off + n)
        batch_keys = [b"%016d" % rng.randrange(keys) for _ in range(n)]
        data += encode_batch_columns(stamps, batch_keys, [value] * n, base_offset=off)
        off += n
        if len(data) >= segment_bytes:
            segs.append(SegmentData(base, bytes(data)))
            base, data = off, bytearray()
    if data:
        segs.append(SegmentData(base, bytes(data)))
    return tuple(segs)


_JOBS: list[CleanJob] = []  # set before the pool forks: workers read them without a copy through pickle


def _clean_one(index: int, check: bool) -> tuple[int, int, int, float]:
    """Clean job ``index``; with ``check``, also time the broker's check of the result."""
    job = _JOBS[index]
    r = clean(job)
    spent = 0.0
    if check:
        start = time.perf_counter()
        verify_result(job, r.segments, r.map_end)
        spent = time.perf_counter() - start
    return r.stats.bytes_read, r.stats.records_kept, r.stats.records_read, spent


def _clean_star(args: tuple[int, bool]) -> tuple[int, int, int, float]:
    return _clean_one(*args)


def measured_bytes_per_key(buffer_bytes: int = 4 << 20) -> tuple[float, float]:
    """``(bytes per key, load)`` of an offset map filled with distinct keys until it takes no more."""
    m = OffsetMap(buffer_bytes)
    rng = np.random.default_rng(7)
    while m.room_for(1024):
        lo = rng.integers(0, 2**63, 1024, dtype=np.uint64)
        m.put_many(lo, lo ^ np.uint64(0x5555), np.arange(1024, dtype=np.int64))
    return m.memory_bytes / m.size, m.size / m.slots


def run_compact_bench(log_mb: int = 64, partitions: int = 4, distinct_keys: int = 100_000, value_size: int = 1024,
                      workers: tuple[int, ...] = (1, 2), batch_records: int = 100,
                      segment_bytes: int = 64 << 20) -> CompactBench:
    per_record = value_size + 16 + 61 // max(batch_records, 1) + 10
    records = max(log_mb * 1_000_000 // per_record // partitions, 1)
    jobs = []
    for p in range(partitions):
        segs = make_log(p, records, distinct_keys // partitions or 1, value_size, batch_records, segment_bytes)
        jobs.append(CleanJob(segs, 0, records, T0, segment_bytes=1 << 30))
    total = sum(s.size for j in jobs for s in j.segments)
    rates: dict[int, float] = {}
    kept = read = 0
    check_s = 0.0
    ctx = multiprocessing.get_context("fork")
    _JOBS[:] = jobs
    try:
        for n in workers:
            check = n == 1 and check_s == 0.0  # one worker: its time minus the checks is exact
            with ctx.Pool(n) as pool:
                pool.map(abs, range(n))  # the workers are up before the clock starts
                start = time.perf_counter()
                results = pool.map(_clean_star, [(i, check) for i in range(len(jobs))], chunksize=1)
                elapsed = time.perf_counter() - start
            spent = sum(r[3] for r in results)
            rates[n] = total / 1e6 / max(elapsed - spent, 1e-9)
            kept = sum(r[1] for r in results)
            read = sum(r[2] for r in results)
            check_s = check_s or spent
    finally:
        _JOBS.clear()
    base = rates[workers[0]]
    per_key, load = measured_bytes_per_key()
    return CompactBench(total, partitions, records * partitions, distinct_keys, value_size, rates,
                        {n: r / n for n, r in rates.items()}, {n: r / base for n, r in rates.items()},
                        kept / max(read, 1), total / 1e6 / check_s if check_s else 0.0, per_key, load)
