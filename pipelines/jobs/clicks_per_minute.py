"""Streaming job: count click events per user per minute and write the counts to another topic.

Reads JSON clicks (``{"user", "url", "ts"}``) from ``--source``, aggregates per user
per one-minute event-time window (watermark one minute), and writes
``{"user", "window_start", "window_end", "clicks"}`` keyed by user to ``--sink``
(update mode: a window's count is written again as it grows; the latest record per
user and window is the current count).

    python -m pipelines.jobs.clicks_per_minute --source clicks --sink clicks-per-minute --available-now
"""

from __future__ import annotations

import os
from typing import Any

import click

from pipelines.spark import connection_from, local_session
from shared.client import Admin
from shared.client.discovery import cluster_data_dir
from shared.errors import ErrorCode, TidelogError

EVENT_SCHEMA = "user STRING, url STRING, ts LONG"


def build_query(spark: Any, servers: str, source: str, sink: str, checkpoint: str, *,
                available_now: bool, starting: str = "earliest", max_offsets_per_trigger: int | None = None,
                fail_on_data_loss: bool = True, options: dict[str, str] | None = None) -> Any:
    """``options``: more source and sink options (the security ones: ``Connection.options``)."""
    from pyspark.sql import functions as F

    extra = dict(options or {})
    reader = (spark.readStream.format("tidelog").options(**extra).option("bootstrap.servers", servers)
              .option("subscribe", source).option("startingOffsets", starting)
              .option("failOnDataLoss", str(fail_on_data_loss).lower()))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    events = (reader.load()
              .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
              .select("e.user", (F.col("e.ts") / 1000).cast("timestamp").alias("event_time"))
              .where(F.col("user").isNotNull()))
    counts = (events.withWatermark("event_time", "1 minute")
              .groupBy(F.window("event_time", "1 minute"), "user").count())
    out = counts.select(
        F.col("user").alias("key"),
        F.to_json(F.struct(
            "user",
            F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_start"),
            F.date_format("window.end", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_end"),
            F.col("count").alias("clicks"),
        )).alias("value"),
    )
    def write_updates(batch_df: Any, _batch_id: int) -> None:
        # Spark's Python stream writers support append mode only; a window's count changes as
        # events arrive, so each micro-batch's updated windows go through the batch writer.
        (batch_df.write.format("tidelog").mode("append").options(**extra)
         .option("bootstrap.servers", servers).option("topic", sink).save())

    writer = (out.writeStream.outputMode("update").foreachBatch(write_updates)
              .option("checkpointLocation", checkpoint))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="10 seconds")
    return writer.start()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--source", default="clicks", show_default=True)
@click.option("--sink", default="clicks-per-minute", show_default=True)
@click.option("--checkpoint", default=None,
              help="Spark checkpoint directory (default: <data dir>/checkpoints/clicks-per-minute, where the data dir "
                   "is --data-dir, else TIDELOG_DATA_DIR, else .tidelog)")
@click.option("--available-now", is_flag=True, help="process what is there, then stop (default: run until Ctrl-C)")
@click.option("--fail-on-data-loss/--no-fail-on-data-loss", default=True, show_default=True,
              help="fail when the checkpoint's offsets are gone from the source topic (else read it again from its start)")
@click.option("--data-dir", default=None, help="local cluster directory (default: TIDELOG_DATA_DIR, else .tidelog)")
@click.option("--bootstrap-server", "bootstrap", default=None)
def main(source: str, sink: str, checkpoint: str | None, available_now: bool, fail_on_data_loss: bool,
         data_dir: str | None, bootstrap: str | None) -> None:
    """Count clicks per user per minute from --source into --sink (see the module doc)."""
    conn = connection_from(data_dir, bootstrap)
    if checkpoint is None:  # next to the cluster it belongs to: a new cluster starts a new checkpoint
        checkpoint = os.path.join(cluster_data_dir(data_dir), "checkpoints", "clicks-per-minute")
    click.echo(f"checkpoint: {checkpoint}", err=True)
    with Admin(conn.servers, **conn.settings) as admin:
        try:
            admin.create_topic(sink, partitions=3)
        except TidelogError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
    spark = local_session("clicks-per-minute")
    query = build_query(spark, conn.servers, source, sink, checkpoint, available_now=available_now,
                        fail_on_data_loss=fail_on_data_loss, options=conn.options)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    n = len(query.recentProgress)
    click.echo(f"done: {n} micro-batch{'' if n == 1 else 'es'}; results in topic {sink}")


if __name__ == "__main__":
    main()
