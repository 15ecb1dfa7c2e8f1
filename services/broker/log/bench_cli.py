"""``tidelog bench log``: the click command for the log and codec benchmark (``bench.py``).

Registered with the CLI through the ``tidelog.bench`` entry-point group (pyproject.toml), so that
``shared/cli`` never imports ``services/``.
"""

from __future__ import annotations

import json

import click

from services.broker.log.bench import run_log_bench
from services.broker.log.bench_validate import format_rows, run_validate_bench


@click.command("log")
@click.option("--records", default=2_000_000, show_default=True, type=click.IntRange(1))
@click.option("--record-size", default=1024, show_default=True, type=click.IntRange(0))
@click.option("--batch-records", default=1000, show_default=True, type=click.IntRange(1))
@click.option("--dir", "directory", default=None, type=click.Path(file_okay=False), help="where to write (default: temp dir)")
@click.option("--validate-only", is_flag=True,
              help="only produce validation, in ns per record, for several batch shapes (bench_validate.py)")
@click.option("--json", "as_json", is_flag=True)
def bench_log(records: int, record_size: int, batch_records: int, directory: str | None, validate_only: bool,
              as_json: bool) -> None:
    """Segmented-log append/read and codec encode/decode speed (no network)."""
    if validate_only:
        rows = run_validate_bench()
        click.echo(json.dumps(rows) if as_json else format_rows(rows))
        return
    r = run_log_bench(records, record_size, batch_records, directory)
    if as_json:
        click.echo(json.dumps(r.as_dict()))
        return
    click.echo(
        f"{r.records} records of {r.record_size} B in batches of {r.batch_records} ({r.batch_bytes} B)\n"
        f"log append: {r.append_mb_s:10.1f} MB/s {r.append_records_s:12,.0f} records/s\n"
        f"log read:   {r.read_mb_s:10.1f} MB/s {r.read_records_s:12,.0f} records/s\n"
        f"encode:     {r.encode_records_s:12,.0f} records/s\n"
        f"decode:     {r.decode_records_s:12,.0f} records/s\n"
        f"validate:   {r.validate_records_s:12,.0f} records/s ({1e9 / r.validate_records_s:.0f} ns per record)"
    )
