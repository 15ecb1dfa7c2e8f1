"""``tidelog cleaner status`` and ``tidelog bench compact``.

``cleaner status`` asks every broker's LogCleaner service for its jobs in progress, the dirty
ratio and compaction delay of each compacted log, and its quarantined logs.
"""

from __future__ import annotations

import json

import click
import grpc

from shared.cli.connect import bootstrap_servers, cluster_options
from shared.proto import cleaner_pb2 as cpb
from shared.proto import cleaner_pb2_grpc as cgrpc
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc


def broker_addresses(bootstrap: str) -> list[str]:
    """Every broker the cluster's metadata lists (the bootstrap ones if none answers)."""
    seeds = [a.strip() for a in bootstrap.split(",") if a.strip()]
    for seed in seeds:
        try:
            with grpc.insecure_channel(seed) as ch:
                md = pb_grpc.BrokerStub(ch).Metadata(pb.MetadataRequest(client_id="tidelog-cli"), timeout=5)
            return sorted({b.address for b in md.brokers if b.address}) or seeds
        except grpc.RpcError:
            continue
    return seeds


def cleaner_status(addresses: list[str]) -> list[dict[str, object]]:
    out = []
    for address in addresses:
        try:
            with grpc.insecure_channel(address) as ch:
                st = cgrpc.LogCleanerStub(ch).CleanerStatus(cpb.CleanerStatusRequest(), timeout=5)
        except grpc.RpcError as exc:
            out.append({"broker": address, "error": str(exc.code())})
            continue
        out.append({
            "broker": address, "broker_id": st.broker_id, "cleaned_bytes": st.cleaned_bytes,
            "jobs_done": st.jobs_done, "jobs_refused": st.jobs_refused,
            "jobs": [{"job": j.job_id, "log": j.log, "worker": j.worker_id, "progress": j.progress,
                      "lease_deadline_ms": j.lease_deadline_ms} for j in st.jobs],
            "logs": [{"log": s.log, "dirty_ratio": round(s.dirty_ratio, 4), "compaction_delay_ms": s.compaction_delay_ms,
                      "first_dirty": s.first_dirty, "first_uncleanable": s.first_uncleanable,
                      "size_bytes": s.size_bytes} for s in st.logs],
            "quarantined": [{"log": q.log, "reason": q.reason} for q in st.quarantined],
        })
    return out


@click.group()
def cleaner() -> None:
    """Log compaction: jobs, dirty logs, quarantined logs."""


@cleaner.command("status")
@cluster_options
@click.option("--json", "as_json", is_flag=True)
def status(bootstrap: str | None, rest: str | None, data_dir: str, as_json: bool) -> None:
    """Jobs in progress, per-log dirty ratio and compaction delay, quarantined logs (every broker)."""
    report = cleaner_status(broker_addresses(bootstrap_servers(bootstrap, rest, data_dir)))
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
    from services.cleaner.bench import run_compact_bench

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
