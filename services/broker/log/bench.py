"""Log and codec benchmark behind ``tidelog bench log``: append/read MB/s, encode/decode records/s."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass

from services.broker.log.partition_log import PartitionLog
from shared.config import LogConfig
from shared.records.builder import encode_batch
from shared.records.decoder import decode_batch
from shared.records.header import check_batch, iter_batches
from shared.records.validate import validate_produced
from shared.runtime import tune_allocator


@dataclass
class LogBenchResult:
    records: int
    record_size: int
    batch_records: int
    batch_bytes: int
    append_mb_s: float
    append_records_s: float
    read_mb_s: float
    read_records_s: float
    encode_records_s: float
    decode_records_s: float
    validate_records_s: float  # the broker's produce-side check of every record (shared.records.validate)
    directory: str

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def run_log_bench(
    records: int = 2_000_000,
    record_size: int = 1024,
    batch_records: int = 1000,
    directory: str | None = None,
    codec_seconds: float = 2.0,
) -> LogBenchResult:
    tune_allocator()
    value = os.urandom(record_size)
    key = os.urandom(16)
    now = int(time.time() * 1000)
    rows = [(now, key, value, None)] * batch_records
    batch = encode_batch(rows)
    n_batches = max(records // batch_records, 1)
    base = tempfile.mkdtemp(prefix="tidelog-bench-", dir=directory)
    try:
        log = PartitionLog(
            os.path.join(base, "bench-0"),
            LogConfig(segment_bytes=1 << 30, max_message_bytes=len(batch) + 1024),
        )
        t0 = time.perf_counter()
        for _ in range(n_batches):
            log.append_as_leader(batch)
        append_s = time.perf_counter() - t0
        total_bytes = n_batches * len(batch)

        t0 = time.perf_counter()
        offset = 0
        read_bytes = 0
        end = log.log_end_offset
        while offset < end:
            data = log.read(offset, 1 << 20).records
            read_bytes += len(data)
            for _, h in iter_batches(data, validate=True):
                offset = h.next_offset
        read_s = time.perf_counter() - t0
        log.close()

        enc_n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < codec_seconds:
            encode_batch(rows)
            enc_n += batch_records
        enc_s = time.perf_counter() - t0

        dec_n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < codec_seconds:
            _, recs = decode_batch(batch)
            dec_n += len(recs)
        dec_s = time.perf_counter() - t0

        val_n = 0
        header = check_batch(batch)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < codec_seconds:
            validate_produced(batch, 0, header)
            val_n += batch_records
        val_s = time.perf_counter() - t0
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return LogBenchResult(
        records=n_batches * batch_records,
        record_size=record_size,
        batch_records=batch_records,
        batch_bytes=len(batch),
        append_mb_s=total_bytes / append_s / 1e6,
        append_records_s=n_batches * batch_records / append_s,
        read_mb_s=read_bytes / read_s / 1e6,
        read_records_s=n_batches * batch_records / read_s,
        encode_records_s=enc_n / enc_s,
        decode_records_s=dec_n / dec_s,
        validate_records_s=val_n / val_s,
        directory=base,
    )
