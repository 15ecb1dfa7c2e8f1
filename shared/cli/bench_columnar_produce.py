"""``tidelog bench produce --columnar``: the produce benchmark through ``Producer.send_batch``.

The same parameters and report as the per-record benchmark (``shared.cli.bench``): RECORDS records of
RECORD-SIZE random bytes with random KEY-SIZE-byte keys, sent as Arrow columns of ``--chunk-bytes``
of values per ``send_batch`` call (the same columns each call: the client's cost is the encoding, not
making data). Latency is measured per record batch (from the ``send_batch`` call that queued it to its
acknowledgement), every ``latency_sample``-th batch.
"""

from __future__ import annotations

import time
from typing import Any

import click
import numpy as np
import pyarrow as pa

from shared.cli import bench_kafka
from shared.cli.bench import _report, _with_cpu, latency_sampler, percentiles, progress_bar
from shared.cli.connect import client_settings
from shared.client import Producer
from shared.client import send_batch as _send_batch  # noqa: F401  imported before the clock starts, not in it

#: Values per send_batch call, in bytes (rounded to whole records).
CHUNK_BYTES = 8 << 20


def _fixed_width_column(rng: np.random.Generator, rows: int, width: int) -> pa.Array:
    """``rows`` random values of ``width`` bytes as one Arrow large_binary array (no Python object per row)."""
    data = rng.integers(0, 256, rows * width, dtype=np.uint8)
    offsets = np.arange(rows + 1, dtype=np.int64) * width
    return pa.Array.from_buffers(pa.large_binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def run(servers: str, topic: str, records: int, record_size: int, key_size: int, acks: str, batch_size: int,
        linger_ms: int, compression: str, throughput: float, latency_sample: int, warmup_records: int,
        as_json: bool, progress: bool | None, client_id: str, show_metrics: bool, cpu: bench_kafka.BrokerCpu,
        chunk_bytes: int = CHUNK_BYTES) -> dict[str, Any]:
    """Produce ``records`` records through ``send_batch`` and print the usual report; returns it."""
    rng = np.random.default_rng()
    chunk = max(1, min(records, chunk_bytes // max(record_size + key_size, 1)))
    values = _fixed_width_column(rng, chunk, record_size)
    keys = _fixed_width_column(rng, chunk, key_size) if key_size else None
    producer = Producer(servers, acks=acks, batch_size=batch_size, linger_ms=linger_ms, client_id=client_id,
                        compression_type=compression, max_request_size=max(4 * batch_size, 4 << 20),
                        **client_settings())
    latencies: list[float] = []
    steady: list[float] = []
    errors: list[BaseException] = []

    bar = progress_bar(records, progress)
    batches = 0
    sent = 0
    t0 = time.perf_counter()
    c0 = time.process_time()  # the client's CPU (all its threads), beside the broker's
    t_steady, c_steady = t0, c0
    try:
        while sent < records:
            m = min(chunk, records - sent)
            if warmup_records and sent <= warmup_records < sent + m:
                t_steady, c_steady = time.perf_counter(), time.process_time()
            if throughput > 0:
                ahead = sent / throughput - (time.perf_counter() - t0)
                if ahead > 0:
                    time.sleep(ahead)
            v = values if m == chunk else values.slice(0, m)
            k = keys if keys is None or m == chunk else keys.slice(0, m)
            t = time.perf_counter()
            into = steady if warmup_records and sent >= warmup_records else latencies
            for f in producer.send_batch(topic, v, keys=k):
                if batches % latency_sample == 0:
                    f.add_callback(latency_sampler(t, into)).add_errback(errors.append)
                batches += 1
            sent += m
            bar.update(m)
        producer.flush()
    finally:
        elapsed = time.perf_counter() - t0
        c1 = time.process_time()
        cpu.stop()
        bar.close()
        producer.close()
    if errors:
        raise click.ClickException(f"{len(errors)} sampled batches failed, first: {errors[0]}")
    res: dict[str, Any] = {
        "records": records, "record_size": record_size, "seconds": elapsed, "records_per_s": records / elapsed,
        "mb_per_s": records * (record_size + key_size) / elapsed / 1e6, "latency_ms": percentiles(latencies + steady),
        "client_cpu_us_per_record": round((c1 - c0) / records * 1e6, 3),
        "acks": acks, "batch_size": batch_size, "linger_ms": linger_ms, "compression": compression,
        "columnar": True, "record_batches": batches, "rows_per_call": chunk,
        "throttled_responses": producer.throttled_responses, "throttle_time_ms_max": producer.throttle_time_ms_max}
    if warmup_records:
        n, secs = records - warmup_records, elapsed - (t_steady - t0)
        res["steady_state"] = {"records": n, "seconds": secs, "records_per_s": n / secs,
                               "mb_per_s": n * (record_size + key_size) / secs / 1e6,
                               "client_cpu_us_per_record": round((c1 - c_steady) / max(n, 1) * 1e6, 3),
                               "latency_ms": percentiles(steady)}
    if show_metrics:
        res["client_metrics"] = producer.metrics()
    _with_cpu(res, cpu)
    _report("sent (columnar: send_batch, latency per record batch)", res, as_json)
    if warmup_records and not as_json:
        _report("sent after the warm-up (steady state)", {**res["steady_state"]}, False)
    return res
