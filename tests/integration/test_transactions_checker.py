"""A transaction checker on a real cluster (3 brokers, 2 coordinators, real etcd), in the suite.

Several transactional producers (processes: ``txn_worker produce``) write transactions across 2 topics x 3
partitions, about a third aborted, while the test SIGKILLs the coordinator owning one producer's
transactional id, one producer (started again with the same transactional id) and a partition leader,
each restarted. Each producer prints every transaction's records before it begins and its outcome as the
client saw it (committed, aborted, unknown). Then a
``read_committed`` consumer reads everything and checks: every acknowledged commit wholly visible (no torn
transaction, no lost record); no aborted record visible; no record duplicated; a transaction of unknown
outcome all or nothing; no record of no transaction; in each partition, each producer's transactions in the
order they committed.

Then a consume-transform-produce job (``txn_worker ctp``, a process) is SIGKILLed mid-way and restarted, and
the coordinator owning its transactional id, the active controller and a leader of its output are SIGKILLed
(and restarted): its output is exactly one copy of the transformed
input, in order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from shared.client import Consumer, Producer, TopicPartition
from tests.conftest import REPO, Cluster, kill_cluster, start_cluster, wait_for
from tests.integration.test_transactions_coordinator import TxnClient

TOPICS = ("chk-a", "chk-b")
PARTITIONS = 3
ENV = {"TIDELOG_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "200"}


@pytest.fixture(scope="module")
def chk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, TxnClient]]:
    c = start_cluster(str(tmp_path_factory.mktemp("txn-checker")), controllers=1, brokers=3, coordinators=2,
                      cleaners=0, quotas=0, extra_env=ENV)
    txc = TxnClient(c)
    try:
        yield c, txc
    finally:
        txc.admin.close()
        kill_cluster(c)


class Worker:
    """A ``txn_worker`` process and the events it printed (read by a thread as they come)."""

    def __init__(self, *args: str, stdin: bool = False) -> None:
        self.args = args
        self.events: list[dict[str, Any]] = []
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed with the process)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.integration.txn_worker", *args], cwd=REPO,
                                     stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                pass

    def tell(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stderr(self, chars: int = 3000) -> str:
        """The tail of what the process wrote on stderr (for failure messages)."""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-chars:]

    def count(self, event: str) -> int:
        return sum(1 for e in self.events if e["event"] == event)

    def last(self, event: str) -> dict[str, Any] | None:
        return next((e for e in reversed(self.events) if e["event"] == event), None)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self._reader.join(5)

    def wait(self, timeout: float) -> int:
        rc = self.proc.wait(timeout)
        self._reader.join(5)
        return rc


def kill_and_restart(c: Cluster, role: str, ident: int, down_s: float = 1.0) -> None:
    proc = c.proc(role, ident)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.popen is not None
    proc.popen.wait(10)
    time.sleep(down_s)
    c.restart(role, ident)


def read_committed(bootstrap: str, expect: set[bytes], topics: tuple[str, ...], partitions: int,
                   timeout: float = 30, settle_s: float = 1.5) -> list[tuple[str, int, int, bytes]]:
    """(topic, partition, offset, value) of every record read_committed shows, read until ``expect`` is seen
    and nothing new comes for ``settle_s`` (or ``timeout``)."""
    out: list[tuple[str, int, int, bytes]] = []
    seen: set[bytes] = set()
    with Consumer(bootstrap, isolation_level="read_committed", auto_offset_reset="earliest") as c:
        tps = [TopicPartition(t, p) for t in topics for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            recs = c.poll(200)
            for r in recs:
                out.append((r.topic, r.partition, r.offset, r.value))
                seen.add(r.value)
            if recs:
                quiet_since = time.monotonic()
            elif expect <= seen and time.monotonic() - quiet_since > settle_s:
                break
    return out


def test_checker_transactions_under_coordinator_and_leader_kills(chk: tuple[Cluster, TxnClient]) -> None:
    c, txc = chk
    for t in TOPICS:
        txc.admin.create_topic(t, partitions=PARTITIONS, replication_factor=3)
    bootstrap = txc.bootstrap
    n_workers, n_txns = 3, 60  # enough that the three kills all land while the workers run
    ids = [f"chk-{w}" for w in range(n_workers)]
    def start(w: int, first: int = 0, seed: int = 0) -> Worker:
        return Worker("produce", bootstrap, ids[w], "--worker", str(w), "--topics", ",".join(TOPICS),
                      "--partitions", str(PARTITIONS), "--first-txn", str(first), "--txns", str(n_txns - first),
                      "--records", "2", "--seed", str(seed or w), "--pause-ms", "20",
                      "--transaction-timeout-ms", "10000")

    workers = [start(w) for w in range(n_workers)]
    killed: list[Worker] = []  # instances SIGKILLed mid-way (their events count too)
    try:
        def progress() -> int:
            return sum(w.count("outcome") for w in workers + killed)

        wait_for(lambda: progress() >= n_workers * 8, 40, what="transactions before the coordinator kill")
        owner = txc.find(ids[0]).node_id
        kill_and_restart(c, "coordinator", owner)
        at = progress()
        wait_for(lambda: progress() >= at + n_workers * 3, 40, what="transactions after the coordinator kill")
        # kill -9 one producer (most likely inside a transaction) and start it again: the new instance's
        # init_transactions fences it and ends its open transaction, whose outcome the test does not know
        victim = workers[1]
        victim.kill()
        killed.append(victim)
        last = victim.last("decided")
        workers[1] = start(1, first=last["txn"] + 1 if last else 0, seed=101)
        at = progress()
        wait_for(lambda: progress() >= at + n_workers * 3, 40, what="transactions after the producer kill")
        leader = txc.admin.describe_topic(TOPICS[0])["partitions"][0]["leader"]
        assert progress() < n_workers * n_txns - n_workers * 5, "the workers finished before the leader kill"
        kill_and_restart(c, "broker", leader)
        for w in workers:
            assert w.wait(60) == 0, f"worker {w.args[2]} failed: {w.events[-3:]}"
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.kill()

    txns: dict[tuple[int, int], dict[str, Any]] = {}  # (worker, txn) -> decided event + outcome
    for wi, w in [(1, k) for k in killed] + list(enumerate(workers)):  # in the order they ran
        for e in w.events:
            if e["event"] == "decided":
                txns[(wi, e["txn"])] = {"commit": e["commit"], "records": e["records"], "outcome": "unknown"}
            elif e["event"] == "outcome":
                txns[(wi, e["txn"])]["outcome"] = e["outcome"]
    outcomes = defaultdict(int)
    for t in txns.values():
        outcomes[t["outcome"]] += 1
    assert len(txns) == n_workers * n_txns
    assert outcomes["committed"] >= n_txns and outcomes["aborted"] >= n_txns // 3, dict(outcomes)
    for t in txns.values():  # the client's outcome matches the writer's decision
        assert t["outcome"] == "unknown" or (t["outcome"] == "committed") == t["commit"]

    committed_values = {v.encode() for t in txns.values() if t["outcome"] == "committed" for _, _, v in t["records"]}
    seen = read_committed(bootstrap, committed_values, TOPICS, PARTITIONS)
    # the aborted transactions did write their records: read_uncommitted shows them, read_committed must not
    aborted_values = {v.encode() for t in txns.values() if t["outcome"] == "aborted" for _, _, v in t["records"]}
    with Consumer(bootstrap, auto_offset_reset="earliest") as raw:
        tps = [TopicPartition(t, p) for t in TOPICS for p in range(PARTITIONS)]
        raw.assign(tps)
        end = raw.end_offsets(tps)
        raw_values: set[bytes] = set()
        deadline = time.monotonic() + 20
        while any(raw.position(tp) < end[tp] for tp in tps) and time.monotonic() < deadline:
            raw_values.update(r.value for r in raw.poll(200) if r.value)
    assert len(raw_values & aborted_values) >= len(aborted_values) // 2
    values = [v for _, _, _, v in seen]
    dups = {v for v in values if values.count(v) > 1}
    assert not dups, f"duplicated records: {sorted(dups)[:10]}"
    where = {v: (t, p) for t, p, _, v in seen}
    by_txn: dict[tuple[int, int], set[bytes]] = defaultdict(set)
    for v in values:
        w, n, _ = v.decode().split("-")
        key = (int(w[1:]), int(n[1:]))
        assert key in txns, f"{v!r} belongs to no transaction"
        by_txn[key].add(v)
    for key, t in txns.items():
        expected = {v.encode() for _, _, v in t["records"]}
        got = by_txn.get(key, set())
        if t["outcome"] == "committed":
            assert got == expected, f"transaction {key} acknowledged committed but torn/lost: missing {expected - got}"
        elif t["outcome"] == "aborted":
            assert not got, f"aborted transaction {key} visible: {sorted(got)}"
        else:
            assert got in (set(), expected), f"transaction {key} of unknown outcome torn: {sorted(got)}"
        for topic, part, v in t["records"]:
            if v.encode() in where:
                assert where[v.encode()] == (topic, part), f"{v} in the wrong partition"
    print(f"outcomes {dict(outcomes)}, {len(seen)} records read_committed; unknown (visible?): "
          f"{[(k, bool(by_txn.get(k))) for k, t in txns.items() if t['outcome'] == 'unknown']}")
    # each partition: each producer's records in the order of its transactions (and of its sends)
    last: dict[tuple[str, int, str], tuple[int, int]] = {}
    for topic, part, _, v in sorted(seen, key=lambda s: (s[0], s[1], s[2])):
        w, n, r = v.decode().split("-")
        order = (int(n[1:]), int(r[1:]))
        prev = last.get((topic, part, w), (-1, -1))
        assert order > prev, f"{topic}-{part}: {v!r} after {w}-t{prev[0]:05d}-r{prev[1]:02d}"
        last[(topic, part, w)] = order


def test_consume_transform_produce_job_under_kills_outputs_exactly_once(chk: tuple[Cluster, TxnClient]) -> None:
    c, txc = chk
    src, dst, group, txn_id = "ctp-k-in", "ctp-k-out", "ctp-k-group", "ctp-k-job"
    parts, per_part = 2, 300
    for t in (src, dst):
        txc.admin.create_topic(t, partitions=parts, replication_factor=3)
    bootstrap = txc.bootstrap
    with Producer(bootstrap, acks="all") as plain:
        for i in range(per_part):
            for p in range(parts):
                plain.send(src, f"in-{p}-{i:05d}".encode(), partition=p)
    args = ("ctp", bootstrap, txn_id, "--input", src, "--output", dst, "--group", group, "--partitions", str(parts),
            "--total", str(parts * per_part), "--batch", "15", "--pause-ms", "30")

    def position(w: Worker) -> int:
        e = w.last("committed") or w.last("started")
        return e["position"] if e else 0

    job = Worker(*args)
    try:
        wait_for(lambda: position(job) >= 120, 40, what="the job's first commits")
        job.kill()  # kill -9 mid-way: its open transaction is aborted by the next instance's init
        job = Worker(*args)
        wait_for(lambda: job.last("started") is not None, 30, what="the restarted job")
        started = job.last("started")
        assert started is not None and started["position"] >= 120
        wait_for(lambda: position(job) >= started["position"] + 120, 40, what="the restarted job's commits")
        kill_and_restart(c, "coordinator", txc.find(txn_id).node_id)
        # and the other services a transaction goes through: the active controller, an output leader
        kill_and_restart(c, "controller", 1)
        kill_and_restart(c, "broker", txc.admin.describe_topic(dst)["partitions"][0]["leader"])
        assert job.wait(90) == 0, job.events[-3:]
    finally:
        if job.proc.poll() is None:
            job.kill()
    expect = {f"IN-{p}-{i:05d}".encode() for p in range(parts) for i in range(per_part)}
    out = read_committed(bootstrap, expect, (dst,), parts)
    for p in range(parts):
        got = [v for _, part, _, v in sorted(out, key=lambda s: (s[1], s[2])) if part == p]
        assert got == [f"IN-{p}-{i:05d}".encode() for i in range(per_part)], \
            f"partition {p}: {len(got)} records, {len(set(got))} distinct"
    with Consumer(bootstrap, group_id=group, enable_auto_commit=False) as cons:
        tps = [TopicPartition(src, p) for p in range(parts)]
        assert cons.committed(tps) == {tp: per_part for tp in tps}
