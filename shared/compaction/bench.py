"""``tidelog bench compact``: how fast cleaner workers clean, with 1 and more worker processes.

Generates compacted-topic logs in memory (16-byte keys drawn from a key space, values of a
fixed size, batches of ``batch_records``), one log per partition, then cleans every log with a
pool of 1, 2, ... worker processes, each running the pure cleaning core on whole logs (what a
worker does with a job, without the gRPC transfer). Reports MB/s of log cleaned per pool size,
the speed-up over one worker and the offset map's bytes per key as measured.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from dataclasses import asdict, dataclass

from shared.compaction.cleaning import CleanJob, SegmentData, clean
from shared.compaction.offset_map import OffsetMap
from shared.records.builder import encode_batch

T0 = 1_700_000_000_000


@dataclass(frozen=True)
class CompactBench:
    log_bytes: int
    partitions: int
    records: int
    distinct_keys: int
    value_size: int
    mb_per_s: dict[int, float]  # workers -> MB/s of log cleaned
    speedup: dict[int, float]
    kept_fraction: float
    map_bytes_per_key: float

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
        data += encode_batch([(T0 + off + i, b"%016d" % rng.randrange(keys), value, None) for i in range(n)],
                             base_offset=off)
        off += n
        if len(data) >= segment_bytes:
            segs.append(SegmentData(base, bytes(data)))
            base, data = off, bytearray()
    if data:
        segs.append(SegmentData(base, bytes(data)))
    return tuple(segs)


_JOBS: list[CleanJob] = []  # set before the pool forks: workers read them without a copy through pickle


def _clean_one(index: int) -> tuple[int, int, int]:
    r = clean(_JOBS[index])
    return r.stats.bytes_read, r.stats.records_kept, r.stats.records_read


def run_compact_bench(log_mb: int = 64, partitions: int = 4, distinct_keys: int = 100_000, value_size: int = 1024,
                      workers: tuple[int, ...] = (1, 2), batch_records: int = 100,
                      segment_bytes: int = 16 << 20) -> CompactBench:
    per_record = value_size + 16 + 90 // max(batch_records, 1) + 8
    records = max(log_mb * 1_000_000 // per_record // partitions, 1)
    jobs = []
    for p in range(partitions):
        segs = make_log(p, records, distinct_keys // partitions or 1, value_size, batch_records, segment_bytes)
        end = records
        jobs.append(CleanJob(segs, 0, end, T0, segment_bytes=1 << 30))
    total = sum(s.size for j in jobs for s in j.segments)
    rates: dict[int, float] = {}
    kept = read = 0
    ctx = multiprocessing.get_context("fork")
    _JOBS[:] = jobs
    for n in workers:
        with ctx.Pool(n) as pool:
            pool.map(abs, range(n))  # the workers are up before the clock starts
            start = time.perf_counter()
            results = pool.map(_clean_one, range(len(jobs)), chunksize=1)
            elapsed = time.perf_counter() - start
        rates[n] = total / 1e6 / elapsed
        kept = sum(r[1] for r in results)
        read = sum(r[2] for r in results)
    _JOBS.clear()
    base = rates[workers[0]]
    m = OffsetMap(1 << 20)
    return CompactBench(total, partitions, records * partitions, distinct_keys, value_size, rates,
                        {n: r / base for n, r in rates.items()}, kept / max(read, 1), m.bytes_per_key_when_full)
