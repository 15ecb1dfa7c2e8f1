"""Batch job: export a topic (every partition, earliest to latest) to Parquet.

    python -m pipelines.jobs.export_parquet --topic clicks --out /tmp/clicks.parquet
"""

from __future__ import annotations

import time
from typing import Any

import click

from pipelines.spark import connection_from, local_session


def export(spark: Any, servers: str, topic: str, out: str, *, as_text: bool = True, min_partitions: int | None = None,
           options: dict[str, str] | None = None) -> int:
    """``options``: more source options (the security ones: ``Connection.options``)."""
    reader = (spark.read.format("tidelog").options(**(options or {})).option("bootstrap.servers", servers)
              .option("subscribe", topic).option("startingOffsets", "earliest").option("endingOffsets", "latest"))
    if min_partitions:
        reader = reader.option("minPartitions", str(min_partitions))
    df = reader.load()
    if as_text:
        df = df.selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "topic", "partition",
                           "offset", "timestamp")
    df.write.mode("overwrite").parquet(out)
    return spark.read.parquet(out).count()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--topic", required=True)
@click.option("--out", required=True, type=click.Path(), help="Parquet output directory (overwritten)")
@click.option("--binary", is_flag=True, help="keep key and value as bytes (default: UTF-8 strings)")
@click.option("--data-dir", default=None, help="local cluster directory (default .tidelog)")
@click.option("--bootstrap-server", "bootstrap", default=None)
def main(topic: str, out: str, binary: bool, data_dir: str | None, bootstrap: str | None) -> None:
    conn = connection_from(data_dir, bootstrap)
    spark = local_session("export-parquet")
    t0 = time.perf_counter()
    n = export(spark, conn.servers, topic, out, as_text=not binary, options=conn.options)
    click.echo(f"exported {n} records of {topic} to {out} in {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
