"""Entry point of the ``tidelog`` console script."""

from __future__ import annotations

import json

import click

from shared.cli.bench import bench_consume, bench_produce
from shared.cli.bench_failover import bench_failover
from shared.cli.bench_partitions import bench_partitions
from shared.cli.cluster_cmds import down, status, up
from shared.cli.dump_log import dump_log
from shared.cli.produce_consume import consume, produce
from shared.cli.topics import topics
from shared.runtime import tune_allocator


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Tidelog: a distributed, partitioned, replicated commit log."""
    tune_allocator()


@cli.group()
def bench() -> None:
    """Benchmarks printing records/s, MB/s and latency percentiles."""


@bench.command("log")
@click.option("--records", default=2_000_000, show_default=True, type=click.IntRange(1))
@click.option("--record-size", default=1024, show_default=True, type=click.IntRange(0))
@click.option("--batch-records", default=1000, show_default=True, type=click.IntRange(1))
@click.option("--dir", "directory", default=None, type=click.Path(file_okay=False), help="where to write (default: temp dir)")
@click.option("--json", "as_json", is_flag=True)
def bench_log(records: int, record_size: int, batch_records: int, directory: str | None, as_json: bool) -> None:
    """Segmented-log append/read and codec encode/decode speed (no network)."""
    from services.broker.log.bench import run_log_bench

    r = run_log_bench(records, record_size, batch_records, directory)
    if as_json:
        click.echo(json.dumps(r.as_dict()))
        return
    click.echo(
        f"{r.records} records of {r.record_size} B in batches of {r.batch_records} ({r.batch_bytes} B)\n"
        f"log append: {r.append_mb_s:10.1f} MB/s {r.append_records_s:12,.0f} records/s\n"
        f"log read:   {r.read_mb_s:10.1f} MB/s {r.read_records_s:12,.0f} records/s\n"
        f"encode:     {r.encode_records_s:12,.0f} records/s\n"
        f"decode:     {r.decode_records_s:12,.0f} records/s"
    )


cli.add_command(dump_log)
cli.add_command(up)
cli.add_command(down)
cli.add_command(status)
cli.add_command(topics)
cli.add_command(produce)
cli.add_command(consume)
bench.add_command(bench_produce)
bench.add_command(bench_consume)
bench.add_command(bench_failover)
bench.add_command(bench_partitions)


@bench.command("spark", context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
               add_help_option=False)
@click.pass_context
def bench_spark(ctx: click.Context) -> None:
    """Spark batch read of a topic into count() and Parquet (records/s). See --help."""
    from pipelines.bench import bench_spark as command

    command.main(args=ctx.args, prog_name="tidelog bench spark", standalone_mode=True)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
