"""The README's Python snippet, run as a newcomer would: against a cluster found through
TIDELOG_DATA_DIR, twice (the second run must not fail on TOPIC_ALREADY_EXISTS), printing the record it
sent and then reading that very record back."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import REPO


def _python_snippet(marker: str = "p.send(", needs: str = "Producer(") -> str:
    with open(os.path.join(REPO, "README.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    [snippet] = [b for b in blocks if marker in b and needs in b and "SASL_SSL" not in b]  # not Security's
    return snippet


def test_the_readme_python_snippet_runs_twice_and_prints_what_it_sent(cluster) -> None:
    snippet = _python_snippet()
    env = {**os.environ, "TIDELOG_DATA_DIR": cluster.info["data_dir"]}
    offsets = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=120,
                           cwd=REPO, env=env)
        assert r.returncode == 0, r.stderr
        sent = re.search(r"sent to partition (\d+) at offset (\d+)", r.stdout)
        assert sent, r.stdout
        offset = int(sent.group(2))
        read_back = [line for line in r.stdout.splitlines() if line.startswith(f"{offset} b'user-1' b'value'")]
        assert read_back and "('trace', b'42')" in read_back[0], r.stdout
        offsets.append(offset)
    assert offsets[1] == offsets[0] + 1  # the same key, the same partition, the next offset


def test_the_readme_columnar_snippet_writes_and_reads_a_table(cluster) -> None:
    """The "Columns: Arrow in, Arrow out" snippet: a pandas table written with send_batch, read back with
    poll_arrow."""
    snippet = _python_snippet("p.send_batch(")
    env = {**os.environ, "TIDELOG_DATA_DIR": cluster.info["data_dir"]}
    r = subprocess.run([sys.executable, "-c", snippet + "\nprint('rows', table.num_rows, table.schema.names)\n"],
                       capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert r.returncode == 0, r.stderr
    assert "100000" in r.stdout.splitlines()[0], r.stdout
    rows = re.search(r"rows (\d+) (\[.*\])", r.stdout)
    assert rows and int(rows.group(1)) > 0, r.stdout
    assert rows.group(2).startswith("['key', 'value', 'topic', 'partition', 'offset', 'timestamp'"), r.stdout


def test_the_readme_kafka_client_snippet_runs_against_the_kafka_listener(cluster) -> None:
    """The Kafka-clients section: confluent-kafka, pointed at kafka_bootstrap, produces idempotently with
    zstd and reads the record back in a group."""
    snippet = _python_snippet("from confluent_kafka import")
    env = {**os.environ, "TIDELOG_DATA_DIR": cluster.info["data_dir"]}
    r = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert "b'k' b'hello' [('h', b'1')]" in r.stdout, r.stdout


def test_the_readme_table_snippet_writes_and_reads_in_one_call_each(cluster) -> None:
    """The one-call snippet: a pandas DataFrame written with write_arrow, the topic read with read_arrow; run
    twice, the second read holds both runs' records."""
    snippet = _python_snippet("write_arrow(bootstrap", "read_arrow(")
    env = {**os.environ, "TIDELOG_DATA_DIR": cluster.info["data_dir"]}
    counts = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=120, cwd=REPO,
                           env=env)
        assert r.returncode == 0, r.stderr
        assert "100000 records written" in r.stdout, r.stdout
        read = re.search(r"(\d+) records read;", r.stdout)
        assert read and "user-" in r.stdout and "partition" in r.stdout, r.stdout
        counts.append(int(read.group(1)))
    assert counts[0] >= 100_000 and counts[1] == counts[0] + 100_000
