"""``tidelog cleaner status`` and ``tidelog bench compact``.

``cleaner status`` asks every broker's LogCleaner service for its jobs in progress, the dirty
ratio and compaction delay of each compacted log, and its quarantined logs.
"""

from __future__ import annotations

import json
from typing import Any

import click

from shared.cli.connect import bootstrap_servers, client_security, cluster_options
from shared.client.cleaner_status import broker_addresses, cleaner_status


@click.group()
def cleaner() -> None:
    """Log compaction: jobs, dirty logs, quarantined logs."""


def only_topics(report: list[dict[str, Any]], topics: tuple[str, ...]) -> list[dict[str, Any]]:
    """``report`` with each broker's jobs, logs and quarantined logs narrowed to ``topics`` (all if empty)."""
    if not topics:
        return report
    wanted = set(topics)

    def keep(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [e for e in entries if e["log"].rsplit("-", 1)[0] in wanted]

    return [b if "error" in b else {**b, "jobs": keep(b["jobs"]), "logs": keep(b["logs"]),
                                    "quarantined": keep(b["quarantined"])} for b in report]


@cleaner.command("status")
@cluster_options
@click.option("--topic", "topics", multiple=True,
              help="only this topic's logs (repeatable; every broker also lists its 50 __consumer_offsets logs)")
@click.option("--json", "as_json", is_flag=True)
def status(bootstrap: str | None, rest: str | None, data_dir: str, topics: tuple[str, ...], as_json: bool) -> None:
    """Jobs in progress, per-log dirty ratio and compaction delay, quarantined logs (every broker)."""
    servers = bootstrap_servers(bootstrap, rest, data_dir)
    security = client_security()
    report = only_topics(cleaner_status(broker_addresses(servers, security), security), topics)
    if as_json:
        click.echo(json.dumps(report))
        return
    for b in report:
        if "error" in b:
            click.echo(f"broker {b['broker']}: unreachable ({b['error']})")
            continue
        click.echo(f"broker {b['broker_id']} ({b['broker']}): {b['jobs_done']} jobs done, {b['jobs_refused']} refused, "
                   f"{b['cleaned_bytes']:,} bytes cleaned")
        for j in b["jobs"]:  # type: ignore[attr-defined]
            click.echo(f"  job {j['job']} on {j['log']} by {j['worker']} ({j['progress']:.0%})")
        for s in b["logs"]:  # type: ignore[attr-defined]
            click.echo(f"  log {s['log']}: dirty ratio {s['dirty_ratio']:.2f}, compaction delay "
                       f"{s['compaction_delay_ms'] / 1000:.1f} s, {s['size_bytes']:,} bytes, dirty from {s['first_dirty']}")
        for q in b["quarantined"]:  # type: ignore[attr-defined]
            click.echo(f"  quarantined {q['log']}: {q['reason']}")
        for w in b["workers"]:  # type: ignore[attr-defined]
            click.echo(f"  worker {w['worker']}: {w['jobs_done']} jobs, {w['cleaned_bytes']:,} bytes cleaned, "
                       f"{w['mb_per_s']:.1f} MB/s")


@click.command("compact")
@click.option("--log-mb", default=64, show_default=True, type=click.IntRange(1), help="total log size generated")
@click.option("--partitions", default=4, show_default=True, type=click.IntRange(1), help="logs (one job each)")
@click.option("--distinct-keys", default=100_000, show_default=True, type=click.IntRange(1))
@click.option("--value-size", default=1024, show_default=True, type=click.IntRange(0))
@click.option("--workers", default="1,2", show_default=True, help="worker process counts to compare")
@click.option("--cluster", "on_cluster", is_flag=True,
              help="real cleaner processes over gRPC against a real broker (a local cluster is started)")
@click.option("--timeout-s", default=600.0, show_default=True, type=click.FloatRange(1),
              help="with --cluster: how long a round may take")
@click.option("--json", "as_json", is_flag=True)
def bench_compact(log_mb: int, partitions: int, distinct_keys: int, value_size: int, workers: str,
                  on_cluster: bool, timeout_s: float, as_json: bool) -> None:
    """MB/s of log cleaned by 1 and 2 worker processes (the cleaning core, without the network).
    The issue's figure is a 1 GB log: --log-mb 1000."""
    from shared.compaction.bench import run_compact_bench

    try:
        counts = tuple(int(w) for w in workers.split(","))
    except ValueError:
        raise click.BadParameter("expected a comma-separated list of worker counts", param_hint="--workers") from None
    if not counts or min(counts) < 1:
        raise click.BadParameter("worker counts must be >= 1", param_hint="--workers")
    if on_cluster:
        _bench_cluster(log_mb, partitions, distinct_keys, value_size, counts, timeout_s, as_json)
        return
    r = run_compact_bench(log_mb, partitions, distinct_keys, value_size, counts)
    if as_json:
        click.echo(json.dumps(r.as_dict()))
        return
    click.echo(f"{r.log_bytes / 1e6:.1f} MB log, {r.records:,} records, {r.distinct_keys:,} distinct keys, "
               f"{r.partitions} logs; kept {r.kept_fraction:.1%} of records; offset map "
               f"{r.map_bytes_per_key:.1f} bytes/key (measured full, load {r.map_load_factor:.2f})")
    for n, rate in r.mb_per_s.items():
        click.echo(f"{n} worker(s): {rate:8.1f} MB/s cleaned, {r.mb_per_s_per_worker[n]:.1f} MB/s per worker  "
                   f"({r.speedup[n]:.2f}x)")
    if r.verify_mb_per_s:
        click.echo(f"broker check of the results: {r.verify_mb_per_s:.1f} MB/s (one core)")


def _bench_cluster(log_mb: int, partitions: int, distinct_keys: int, value_size: int, counts: tuple[int, ...],
                   timeout_s: float, as_json: bool) -> None:
    from shared.cli.compact_cluster_bench import run_cluster_compact_bench

    try:
        r = run_cluster_compact_bench(log_mb, partitions, distinct_keys, value_size, counts, timeout_s)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(r.as_dict()))
        return
    click.echo(f"{r.log_bytes / 1e6:.1f} MB produced per round, {r.distinct_keys:,} distinct keys, {r.partitions} "
               "logs; one broker; cleaner processes over gRPC")
    base = r.mb_per_s[counts[0]]
    for n, rate in r.mb_per_s.items():
        click.echo(f"{n} worker(s): {rate:8.1f} MB/s cleaned end to end ({r.cleaned_bytes[n] / 1e6:.1f} MB in "
                   f"{r.seconds[n]:.2f} s, {rate / base:.2f}x); CPU: broker {r.broker_cpu_s[n]:.2f} s, "
                   f"workers {r.workers_cpu_s[n]:.2f} s")
