"""``tidelog bench compact``: the click command for the compaction benchmark (``bench.py``).

Registered with the CLI through the ``tidelog.bench`` entry-point group (pyproject.toml), so that
``shared/cli`` never imports ``services/``.
"""

from __future__ import annotations

import json

import click

from services.cleaner.bench import run_compact_bench


@click.command("compact")
@click.option("--log-mb", default=64, show_default=True, type=click.IntRange(1), help="total log size generated")
@click.option("--partitions", default=4, show_default=True, type=click.IntRange(1), help="logs (one job each)")
@click.option("--distinct-keys", default=100_000, show_default=True, type=click.IntRange(1))
@click.option("--value-size", default=1024, show_default=True, type=click.IntRange(0))
@click.option("--workers", default="1,2", show_default=True, help="worker process counts to compare")
@click.option("--json", "as_json", is_flag=True)
def bench_compact(log_mb: int, partitions: int, distinct_keys: int, value_size: int, workers: str,
                  as_json: bool) -> None:
    """MB/s of log cleaned by 1 and 2 worker processes (the cleaning core, without the network)."""
    try:
        counts = tuple(int(w) for w in workers.split(","))
    except ValueError:
        raise click.BadParameter("expected a comma-separated list of worker counts", param_hint="--workers") from None
    if not counts or min(counts) < 1:
        raise click.BadParameter("worker counts must be >= 1", param_hint="--workers")
    r = run_compact_bench(log_mb, partitions, distinct_keys, value_size, counts)
    if as_json:
        click.echo(json.dumps(r.as_dict()))
        return
    click.echo(f"{r.log_bytes / 1e6:.1f} MB log, {r.records:,} records, {r.distinct_keys:,} distinct keys, "
               f"{r.partitions} logs; kept {r.kept_fraction:.1%} of records; offset map "
               f"{r.map_bytes_per_key:.1f} bytes/key")
    for n, rate in r.mb_per_s.items():
        click.echo(f"{n} worker(s): {rate:8.1f} MB/s cleaned  ({r.speedup[n]:.2f}x)")
