"""A streaming copy job through the exactly-once ``tidelog`` sink whose first attempt of one task fails after
it wrote part of its rows: run by test_spark_sink_retry.py in a process of its own, because Spark retries
a failed task in local mode only with ``local[N,maxFailures]``, a master a test session shared with other
tests (``local[2]``) cannot change.

    python -m tests.integration.spark_retry_job BOOTSTRAP SOURCE SINK CHECKPOINT PREFIX FLAG FAIL_AT

The task of source partition 0 fails when it reaches offset FAIL_AT while the file FLAG exists (deleting it:
the retry goes through), once at least 1,000 rows of its transaction are in the output topic's log. Prints
one JSON line: the query's error (None) and the number of micro-batches that read rows.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> int:
    bootstrap, source, sink, ck, prefix, flag, fail_at = argv[:7]
    from pyspark.sql.functions import col, udf

    from pipelines.spark import local_session

    spark = local_session("tidelog-sink-retry", master="local[2,2]")  # 2 threads, a task may fail once
    # rows reach the sink's Python writer in Arrow batches of this many (default 10,000: all of a small task's
    # rows at once, after the UDF ran on every one of them)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")

    @udf("binary")
    def fail_once(value, partition, offset):  # no type hints: they would make it an Arrow UDF
        from pyspark import TaskContext

        if partition == 0 and offset == int(fail_at) and os.path.exists(flag):
            _wait_for_rows_in(bootstrap, sink, 1000)  # the attempt's first rows are in the log, uncommitted
            os.remove(flag)
            with open(flag + ".failed", "w") as f:
                f.write(str(TaskContext.get().attemptNumber()))
            raise RuntimeError("injected task failure")
        if partition == 0 and offset == int(fail_at):
            with open(flag + ".retried", "w") as f:
                f.write(str(TaskContext.get().attemptNumber()))
        return value

    q = (spark.readStream.format("tidelog").option("bootstrap.servers", bootstrap).option("subscribe", source)
         .option("startingOffsets", "earliest").load()
         .select(col("key"), fail_once(col("value"), col("partition"), col("offset")).alias("value"))
         .writeStream.format("tidelog").option("bootstrap.servers", bootstrap).option("topic", sink)
         .option("transactional.id.prefix", prefix).option("checkpointLocation", ck)
         .trigger(availableNow=True).start())
    error = None
    try:
        q.awaitTermination(120)
    except Exception as exc:  # the test reports it
        error = str(exc)[:2000]
    error = error or (str(q.exception())[:2000] if q.exception() is not None else None)
    batches = len([p for p in q.recentProgress if p["numInputRows"]])
    print(json.dumps({"error": error, "batches": batches}), flush=True)
    spark.stop()
    return 0


def _wait_for_rows_in(bootstrap: str, topic: str, n: int, timeout_s: float = 60.0) -> None:
    import time

    from shared.client import Consumer, TopicPartition

    deadline = time.monotonic() + timeout_s
    with Consumer(bootstrap) as c:
        tps = [TopicPartition(topic, p) for p in range(2)]
        while sum(c.end_offsets(tps).values()) < n and time.monotonic() < deadline:
            time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
