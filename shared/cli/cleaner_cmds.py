"""``tidelog cleaner status`` and ``tidelog bench compact``.

``cleaner status`` asks every broker's LogCleaner service for its jobs in progress, the dirty
ratio and compaction delay of each compacted log, and its quarantined logs.
"""

from __future__ import annotations

import json

import click

from shared.cli.connect import bootstrap_servers, cluster_options
from shared.client.cleaner_status import broker_addresses, cleaner_status


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
        for w in b["workers"]:  # type: ignore[attr-defined]
            click.echo(f"  worker {w['worker']}: {w['jobs_done']} jobs, {w['cleaned_bytes']:,} bytes cleaned, "
                       f"{w['mb_per_s']:.1f} MB/s")
