"""``tidelog bench consume --columnar``: the consume benchmark through ``Consumer.poll_arrow``.

Same parameters, same output lines as ``tidelog bench consume`` (``shared.cli.bench``): records/s, MB/s
(keys and values) and the latency of each poll. Each poll takes every record already fetched (the
prefetch buffer bounds it), so ``max_poll_records`` does not apply here.
"""

from __future__ import annotations

import time
from typing import Any

import click
import pyarrow.compute as pc


def _bytes(table: Any) -> int:
    """Key and value bytes of a poll_arrow table (nulls count as 0)."""
    total = 0
    for name in ("key", "value"):
        got = pc.sum(pc.binary_length(table.column(name))).as_py()
        total += got or 0
    return total


def run(servers: str, topic: str, records: int, fetch_max_bytes: int, max_partition_fetch_bytes: int,
        max_poll_records: int, fetch_depth: int, timeout_ms: int, group: str | None, as_json: bool,
        progress: bool | None, client_id: str, show_metrics: bool, cpu: Any, fetch_transport: str = "auto") -> None:
    """Read ``records`` records from the start of ``topic`` with ``poll_arrow`` and report as ``bench consume``.

    ``cpu`` is the ``bench_kafka.BrokerCpu`` the caller started (stopped here when the last record is read).
    """
    from shared.cli.bench import (  # here: bench.py imports this module
        _report,
        _with_cpu,
        bench_consumer,
        percentiles,
        progress_bar,
    )

    consumer = bench_consumer(servers, topic, client_id, fetch_max_bytes, max_partition_fetch_bytes, max_poll_records,
                              fetch_depth, group, fetch_transport)
    bar = progress_bar(records, progress)
    n = 0
    nbytes = 0
    poll_ms: list[float] = []
    t0 = time.perf_counter()
    idle = t0
    try:
        while n < records:
            t = time.perf_counter()
            table = consumer.poll_arrow(100, max_records=records - n)
            poll_ms.append((time.perf_counter() - t) * 1000)
            k = table.num_rows
            if not k:
                if (time.perf_counter() - idle) * 1000 > timeout_ms:
                    raise click.ClickException(f"only {n} of {records} records arrived before {timeout_ms} ms of idleness")
                continue
            idle = time.perf_counter()
            nbytes += _bytes(table)
            n += k
            bar.update(k)
        elapsed = time.perf_counter() - t0
        cpu.stop()
        client_metrics = consumer.metrics()
    finally:
        bar.close()
        consumer.close()
    res = {"records": n, "seconds": elapsed, "records_per_s": n / elapsed, "mb_per_s": nbytes / elapsed / 1e6,
           "latency_ms": percentiles(poll_ms), "throttled_responses": consumer.throttled_responses,
           "columnar": True}
    if show_metrics:
        res["client_metrics"] = client_metrics
    _with_cpu(res, cpu)
    _report("consumed (columnar)", res, as_json)
