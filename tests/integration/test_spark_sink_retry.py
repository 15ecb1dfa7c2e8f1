"""The exactly-once ``tidelog`` sink under an in-Spark task retry, with real Spark against a real cluster:
a task of a micro-batch fails after it wrote part of its rows, Spark retries it (``local[2,2]``: a task may
fail once), and a read_committed reader of the output topic sees each row exactly once; the failed
attempt's rows are in the log, never committed (its writer returned normally: Spark ends a task's writer
input as if complete when an upstream Python UDF raises; only the driver's commit() commits)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from shared.client import Consumer, Producer, TopicPartition
from tests.conftest import REPO
from tests.integration.test_spark import unique

#: rows of source partition 0, and the offset where its first attempt fails. Values are ~1 KiB so that the
#: 64 KiB buffers between Spark and its Python workers hold few rows: rows reach the sink's writer (which
#: sends them 1,000 at a time) while the UDF is still short of FAIL_AT, and the job stays small.
ROWS, FAIL_AT, PAD = 3_000, 2_600, "." * 1024


def _values(bootstrap: str, topic: str, n_partitions: int, isolation: str) -> list[str]:
    """Every record of ``topic`` as a consumer with ``isolation`` sees it (read to the end / the LSO),
    without the padding."""
    tps = [TopicPartition(topic, p) for p in range(n_partitions)]
    with Consumer(bootstrap, isolation_level=isolation) as c:
        c.assign(tps)
        c.seek_to_beginning(*tps)
        end = c.end_offsets(tps)
        out: list[str] = []
        while any(c.position(tp) < end[tp] for tp in tps):
            out.extend(r.value.decode().split(":", 1)[0] for r in c.poll(1.0))
    return sorted(out)


def test_a_task_retried_by_spark_after_a_partial_write_leaves_exactly_one_copy(env, tmp_path) -> None:
    _, bootstrap, admin = env
    source, sink, prefix = unique("retry-in"), unique("retry-out"), unique("retry")
    admin.create_topic(source, partitions=2)
    admin.create_topic(sink, partitions=2)
    with Producer(bootstrap, linger_ms=5, batch_size=256 << 10) as p:
        for i in range(ROWS):
            p.send(source, f"a{i}:{PAD}".encode(), partition=0)
        for i in range(300):
            p.send(source, f"b{i}:{PAD}".encode(), partition=1)
    expected = sorted([f"a{i}" for i in range(ROWS)] + [f"b{i}" for i in range(300)])
    flag = str(tmp_path / "fail")
    open(flag, "w").close()
    # partition 0's first attempt fails at offset FAIL_AT, once at least 1,000 of its rows are in the sink's log
    job = subprocess.run(
        [sys.executable, "-m", "tests.integration.spark_retry_job", bootstrap, source, sink, str(tmp_path / "ck"),
         prefix, flag, str(FAIL_AT)],
        cwd=REPO, capture_output=True, text=True, timeout=240)
    lines = [ln for ln in job.stdout.splitlines() if ln.startswith("{")]
    assert job.returncode == 0 and lines, job.stderr[-4000:]
    result = json.loads(lines[-1])
    assert result["error"] is None, result["error"]
    assert not os.path.exists(flag)  # the first attempt failed ...
    with open(flag + ".failed") as f:
        assert f.read() == "0"
    with open(flag + ".retried") as f:  # ... and Spark ran the task again in the same query
        assert f.read() == "1"
    assert result["batches"] == 1  # one micro-batch: the retry was Spark's, not a re-run of the batch
    committed = _values(bootstrap, sink, 2, "read_committed")
    missing = sorted(set(expected) - set(committed), key=lambda v: (v[0], int(v[1:])))
    assert committed == expected, (f"{len(committed)} rows committed for {len(expected)}; missing {len(missing)}: "
                                   f"{missing[:3]}..{missing[-3:]}")
    uncommitted = _values(bootstrap, sink, 2, "read_uncommitted")
    assert set(uncommitted) == set(expected)
    assert len(uncommitted) > len(expected)  # the failed attempt's rows reached the log (then aborted)
