"""``Consumer.poll_arrow`` against a real one-broker cluster: a group member reads Arrow tables, commits,
and a new consumer of the group resumes at the committed offset."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa

from shared.client import Consumer, Producer, TopicPartition
from tests.integration.test_groups import find_coordinator, small_cluster


def read_rows(consumer: Consumer, n: int, timeout_s: float = 30) -> pa.Table:
    tables: list[pa.Table] = []
    have = 0
    deadline = time.monotonic() + timeout_s
    while have < n:
        assert time.monotonic() < deadline, f"only {have} of {n} rows arrived"
        t = consumer.poll_arrow(200, max_records=n - have)
        tables.append(t)
        have += t.num_rows
    return pa.concat_tables(tables)


def test_poll_arrow_in_a_group_commits_and_a_restarted_consumer_resumes(make_cluster: Any) -> None:
    _, bootstrap, admin = small_cluster(make_cluster)
    try:
        admin.create_topic("arrow", partitions=1)
        find_coordinator(bootstrap, "A")
        with Producer(bootstrap, linger_ms=2) as p:
            for i in range(500):
                p.send("arrow", b"v%d" % i, key=b"k%d" % i, headers=[("i", b"%d" % i)] if i % 10 == 0 else None)
            p.flush()
        tp = TopicPartition("arrow", 0)
        first = Consumer(bootstrap, group_id="A", auto_offset_reset="earliest", enable_auto_commit=False)
        try:
            first.subscribe(["arrow"])
            rows = read_rows(first, 300)
            assert rows.column("offset").to_pylist() == list(range(300))
            assert rows.column("value").to_pylist() == [b"v%d" % i for i in range(300)]
            assert rows.column("headers").to_pylist()[10] == [{"key": "i", "value": b"10"}]
            assert set(rows.column("topic").to_pylist()) == {"arrow"}
            assert first.position(tp) == 300
            first.commit()
            assert first.committed([tp]) == {tp: 300}
        finally:
            first.close()
        second = Consumer(bootstrap, group_id="A", auto_offset_reset="earliest", enable_auto_commit=False)
        try:
            second.subscribe(["arrow"])
            rest = read_rows(second, 200)
            assert rest.column("offset").to_pylist() == list(range(300, 500))
            assert second.position(tp) == 500
        finally:
            second.close()
    finally:
        admin.close()
