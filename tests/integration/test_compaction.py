"""Compaction end to end: a real broker offers jobs, a real cleaner worker cleans, the log shrinks
and a consumer from the beginning still reads the latest value of every key (deletes gone or
still visible as tombstones within delete.retention.ms)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import grpc
import httpx

from shared.client import Admin, Consumer, Producer, TopicPartition
from shared.proto import cleaner_pb2 as cpb
from shared.proto import cleaner_pb2_grpc as cgrpc
from tests.conftest import wait_for

ENV = {"TIDELOG_LOG_CLEANER_BACKOFF_MS": "100", "TIDELOG_HOUSEKEEPING_INTERVAL_MS": "200",
       "TIDELOG_CONTROLLED_SHUTDOWN_ENABLE": "false",  # one broker: nowhere to move leaderships (a 10 s wait)
       "TIDELOG_LOG_CLEANER_LEASE_MS": "2000"}
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "16384", "min.cleanable.dirty.ratio": "0.01",
           "file.delete.delay.ms": "0"}


def status(address: str) -> cpb.CleanerStatusResponse:
    with grpc.insecure_channel(address) as ch:
        return cgrpc.LogCleanerStub(ch).CleanerStatus(cpb.CleanerStatusRequest(), timeout=5)


def read_from_start(bootstrap: str, topic: str, end: int) -> list:
    consumer = Consumer(bootstrap, auto_offset_reset="earliest")
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        out: list = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and consumer.position(tp) < end:
            out.extend(consumer.poll(300))
        return out
    finally:
        consumer.close()


def produce_updates(bootstrap: str, topic: str, rounds: int, keys: int) -> dict[bytes, bytes | None]:
    latest: dict[bytes, bytes | None] = {}
    with Producer(bootstrap, linger_ms=5) as producer:
        for i in range(rounds * keys):
            key = b"key-%03d" % (i % keys)
            value = None if i % 7 == 3 else (b"value-%06d-" % i).ljust(100, b".")
            producer.send(topic, value, key=key)
            latest[key] = value
        producer.flush()
    return latest


def test_a_worker_cleans_the_log_and_the_latest_values_survive(make_cluster) -> None:
    c = make_cluster(controllers=1, brokers=1, cleaners=1, coordinators=0, quotas=0, extra_env=ENV)
    broker = c.procs("broker")[0].address
    admin = Admin(broker)
    try:
        admin.create_topic("compacted", partitions=1, replication_factor=1, configs=COMPACT)
        latest = produce_updates(broker, "compacted", rounds=60, keys=20)
        end = 60 * 20
        first = wait_for(lambda: [s for s in status(broker).logs if s.log == "compacted-0"], 10, what="log listed")
        size_before = first[0].size_bytes
        done = wait_for(lambda: (s := status(broker)).jobs_done >= 1 and s, 30, what="a cleaning")
        assert done.jobs_refused == 0 and not done.quarantined
        shrunk = wait_for(lambda: status(broker).logs[0].size_bytes < size_before / 2, 10, what="log shrinks")
        assert shrunk
        records = read_from_start(broker, "compacted", end)
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets)) and len(records) < end / 2
        seen = {r.key: r.value for r in records}
        assert seen == latest  # tombstones still there: delete.retention.ms is a day
        cli = subprocess.run([sys.executable, "-m", "shared.cli.main", "cleaner", "status", "--bootstrap-server",
                              broker, "--json"], capture_output=True, text=True, timeout=60, check=True)
        (report,) = json.loads(cli.stdout)
        assert report["jobs_done"] >= 1 and report["logs"][0]["log"] == "compacted-0"
        assert report["workers"][0]["cleaned_bytes"] > 0
        (rest,) = httpx.get(f"{c.rest}/v1/cleaner", timeout=10).json()
        assert rest["jobs_done"] >= 1 and rest["logs"][0]["dirty_ratio"] < 0.5 and rest["workers"]
        assert 0 < time.time() * 1000 - rest["logs"][0]["last_cleaned_ms"] < 120_000
    finally:
        admin.close()


def test_a_killed_worker_loses_its_lease_and_another_finishes_the_job(make_cluster) -> None:
    env = dict(ENV, TIDELOG_LOG_CLEANER_BACKOFF_MS="50")
    c = make_cluster(controllers=1, brokers=1, cleaners=2, coordinators=0, quotas=0, extra_env=env)
    broker = c.procs("broker")[0].address
    admin = Admin(broker)
    try:
        admin.create_topic("compacted", partitions=1, replication_factor=1, configs=COMPACT)
        # pause both workers so the job is taken by a worker we then kill while it holds the lease
        workers = c.procs("cleaner")
        for w in workers:
            os.kill(w.pid, signal.SIGSTOP)
        latest = produce_updates(broker, "compacted", rounds=300, keys=10)
        os.kill(workers[0].pid, signal.SIGCONT)
        wait_for(lambda: status(broker).jobs, 10, interval=0.005, what="job leased")
        os.kill(workers[0].pid, signal.SIGKILL)
        killed = status(broker)
        assert killed.jobs and killed.jobs_done == 0, "the worker finished before it could be killed"
        dead_lease = killed.jobs[0]
        os.kill(workers[1].pid, signal.SIGCONT)
        done = wait_for(lambda: (s := status(broker)).jobs_done >= 1 and s, 2 + 5, what="job finished")
        assert not done.quarantined and dead_lease.worker_id not in [j.worker_id for j in done.jobs]
        records = read_from_start(broker, "compacted", 3000)
        assert {r.key: r.value for r in records} == latest
    finally:
        admin.close()


def test_a_broker_killed_mid_swap_recovers_a_valid_log_with_every_latest_value(make_cluster, tmp_path) -> None:
    env = dict(ENV, TIDELOG_FAULT_SWAP="delete:0", TIDELOG_FAULT_SWAP_ONCE=str(tmp_path / "fired"))
    c = make_cluster(controllers=1, brokers=1, cleaners=1, coordinators=0, quotas=0, extra_env=env)
    broker = c.procs("broker")[0].address
    admin = Admin(broker)
    try:
        admin.create_topic("compacted", partitions=1, replication_factor=1, configs=COMPACT)
        # The cleaner waits until every update is written: on a loaded machine it could otherwise
        # reach the swap (and the broker its fault) while the producer is still sending.
        cleaner = c.procs("cleaner")[0]
        os.kill(cleaner.pid, signal.SIGSTOP)
        try:
            latest = produce_updates(broker, "compacted", rounds=60, keys=20)
        finally:
            os.kill(cleaner.pid, signal.SIGCONT)
        proc = c.proc("broker", 1)
        wait_for(lambda: proc.popen.poll() is not None, 30, what="the broker killed mid-swap")
        assert (tmp_path / "fired").exists()
        c.restart("broker", 1)
        done = wait_for(lambda: (s := status(broker)).jobs_done >= 1 and s, 30, what="cleaning after the restart")
        assert not done.quarantined
        records = read_from_start(broker, "compacted", 60 * 20)
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets)) and len(records) < 60 * 20 / 2
        assert {r.key: r.value for r in records} == latest
    finally:
        admin.close()
