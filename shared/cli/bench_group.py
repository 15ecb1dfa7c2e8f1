"""``tidelog bench group``: consumer-group figures against a running cluster.

(a) ``--members`` consumers join a new group on a ``--partitions`` topic holding one record per
partition: time from cold until every partition is assigned and its record consumed;
(b) one more member joins the stable group: time until it owns its partitions, and how many
partitions the others gave up (revoked), against how many it got;
(c) offset commits per second (``acks=all``), every member committing in a loop: first ``commit()``
of all its positions (one request for ~partitions/members offsets, waiting for each), then
``commit_async()`` of one partition's offset at a time, pipelined on the member's ordered commit
stream (Kafka's commitAsync). Only commits the coordinator acknowledged are counted.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import click

from shared.cli.connect import bootstrap_servers, cluster_options
from shared.client import Admin, Consumer, Producer, TopicPartition
from shared.client.cluster import ClusterClient
from shared.errors import TidelogError


class _Listener:
    def __init__(self) -> None:
        self.assigned_at: float | None = None
        self.revoked = 0
        self.assigned = 0

    def on_partitions_assigned(self, tps: set[TopicPartition]) -> None:
        self.assigned += len(tps)
        self.assigned_at = self.assigned_at or time.monotonic()

    def on_partitions_revoked(self, tps: set[TopicPartition]) -> None:
        self.revoked += len(tps)

    def on_partitions_lost(self, tps: set[TopicPartition]) -> None:
        self.revoked += len(tps)


class _Member(threading.Thread):
    def __init__(self, servers: str, group: str, topic: str, seen: set[TopicPartition], lock: threading.Lock) -> None:
        super().__init__(daemon=True)
        self.listener = _Listener()
        self.consumer = Consumer(servers, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                                 heartbeat_interval_ms=1000)
        self.consumer.subscribe([topic], listener=self.listener)
        self.seen, self.lock = seen, lock
        self.stop = threading.Event()
        self.commit_mode = threading.Event()
        self.pipelined = False  # commit phase: commit() of every position, or commit_async() of one at a time
        self.commits = 0
        self.commit_errors = 0
        self.last_error = ""

    def run(self) -> None:
        while not self.stop.is_set():
            if self.commit_mode.is_set():
                if self.pipelined:
                    self._commit_async()
                    continue
                try:
                    self.consumer.commit()  # the positions of every owned partition, one request
                    self.commits += 1
                except Exception as exc:  # a commit refused mid-rebalance is retried on the next round
                    self._failed(exc)
                continue
            batch = self.consumer.poll(50)
            if batch:
                with self.lock:
                    self.seen.update(batch.partitions())
        self.consumer.close()

    def _commit_async(self) -> None:
        """One partition's offset per commit; ``commit_async`` waits only when 128 are in flight."""
        owned = sorted(self.consumer.assignment())
        for i, tp in enumerate(owned):
            if self.stop.is_set() or not self.pipelined:
                return
            self.consumer.commit_async({tp: i}, self._answered)

    def _answered(self, offsets: dict[TopicPartition, int], err: Exception | None) -> None:
        if err is None:
            self.commits += 1  # only this member's commit-stream thread counts
        else:
            self._failed(err)

    def _failed(self, exc: Exception) -> None:
        self.commit_errors += 1
        self.last_error = str(exc)


def _commit_rate(crew: list[_Member], seconds: float) -> tuple[int, float]:
    """Acknowledged commits of the whole crew over ``seconds``: (commits, elapsed)."""
    t0 = time.monotonic()
    before = sum(m.commits for m in crew)
    time.sleep(seconds)
    return sum(m.commits for m in crew) - before, time.monotonic() - t0


def _create_topic(servers: str, topic: str, partitions: int) -> None:
    """Created 100 partitions at a time (one etcd transaction holds at most ~127 writes)."""
    with Admin(servers) as admin:
        admin.create_topic(topic, min(partitions, 100))
        for total in range(200, partitions + 100, 100):
            admin.create_partitions(topic, min(total, partitions))
    cluster = ClusterClient(servers, "bench-group")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until the brokers' metadata shows every partition
        try:
            if len(cluster.refresh([topic]).topics.get(topic, {})) >= partitions:
                break
        except TidelogError:
            pass  # a broker busy creating the partitions may not answer at once
        time.sleep(0.2)
    cluster.close()


def _wait_balanced(crew: list[_Member], partitions: int, deadline: float) -> None:
    """Until the group is stable: every partition owned, counts within one of each other."""
    while time.monotonic() < deadline:
        sizes = [len(m.consumer.assignment()) for m in crew]
        if sum(sizes) == partitions and max(sizes) - min(sizes) <= 1:
            return
        time.sleep(0.05)


def run_group_bench(servers: str, partitions: int, members: int, seconds: float) -> dict[str, Any]:
    topic, group = f"bench-group-{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}"
    _create_topic(servers, topic, partitions)
    with Producer(servers, linger_ms=5) as p:
        for i in range(partitions):
            p.send(topic, b"x", partition=i)
        p.flush()
    seen: set[TopicPartition] = set()
    lock = threading.Lock()
    start = time.monotonic()
    crew = [_Member(servers, group, topic, seen, lock) for _ in range(members)]
    for m in crew:
        m.start()
    deadline = start + 120
    while len(seen) < partitions and time.monotonic() < deadline:
        time.sleep(0.02)
    cold_s = time.monotonic() - start
    _wait_balanced(crew, partitions, deadline)
    balanced_s = time.monotonic() - start
    for m in crew:
        m.listener.revoked = 0
    joined = time.monotonic()
    late = _Member(servers, group, topic, seen, lock)
    late.start()
    while late.listener.assigned_at is None and time.monotonic() < joined + 60:
        time.sleep(0.01)
    join_s = (late.listener.assigned_at or time.monotonic()) - joined
    crew.append(late)
    _wait_balanced(crew, partitions, time.monotonic() + 60)
    for m in crew:
        m.commit_mode.set()
    commits, commit_s = _commit_rate(crew, seconds)
    for m in crew:
        m.pipelined = True
    time.sleep(0.5)  # the sync commits in flight finish; the streams open
    async_commits, async_s = _commit_rate(crew, seconds)
    for m in crew:
        m.stop.set()
    for m in crew:
        m.join(15)
    return {
        "partitions": partitions, "members": members,
        "cold_all_assigned_and_consumed_s": round(cold_s, 3), "cold_complete": len(seen) >= partitions,
        "cold_balanced_s": round(balanced_s, 3),
        "join_time_to_own_partitions_s": round(join_s, 3),
        "join_partitions_moved_to_new_member": late.listener.assigned,
        "join_partitions_revoked_from_others": sum(m.listener.revoked for m in crew[:-1]),
        "commits_per_s": round(commits / commit_s), "commit_seconds": round(commit_s, 2),
        "partition_offsets_per_s": round(commits * partitions / len(crew) / commit_s),
        "async_commits_per_s": round(async_commits / async_s),
        "commit_errors": sum(m.commit_errors for m in crew),
        "last_commit_error": next((m.last_error for m in crew if m.last_error), ""),
    }


@click.command("group")
@click.option("--partitions", type=click.IntRange(1, 10_000), default=1000, show_default=True)
@click.option("--members", type=click.IntRange(1, 100), default=10, show_default=True)
@click.option("--seconds", type=click.FloatRange(0.5), default=5.0, show_default=True, help="commit phase length")
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def bench_group(partitions: int, members: int, seconds: float, as_json: bool, bootstrap: str | None, rest: str | None,
                data_dir: str) -> None:
    """Consumer groups: cold start, one member joining, offset commits/s (acks=all)."""
    res = run_group_bench(bootstrap_servers(bootstrap, rest, data_dir), partitions, members, seconds)
    if as_json:
        click.echo(json.dumps(res))
        return
    click.echo(
        f"(a) {members} members, {partitions} partitions: every partition assigned and consumed after "
        f"{res['cold_all_assigned_and_consumed_s']:.2f} s{'' if res['cold_complete'] else ' (INCOMPLETE)'}, "
        f"spread evenly after {res['cold_balanced_s']:.2f} s\n"
        f"(b) member {members + 1} joins: owns its partitions after {res['join_time_to_own_partitions_s']:.2f} s; "
        f"{res['join_partitions_moved_to_new_member']} partitions moved to it, "
        f"{res['join_partitions_revoked_from_others']} revoked from the others\n"
        f"(c) offset commits (acks=all) from {members + 1} members: commit() of all ~{partitions // (members + 1)} "
        f"positions each: {res['commits_per_s']:,} commits/s ({res['partition_offsets_per_s']:,} partition offsets/s); "
        f"commit_async() of one offset each: {res['async_commits_per_s']:,} commits/s"
        + (f" ({res['commit_errors']} failed: {res['last_commit_error']})" if res["commit_errors"] else "")
    )
