"""``tidelog bench partitions``: a local cluster holding thousands of partitions, measured.

Starts its own cluster (etcd, 2 controllers, N brokers, no other roles) in a
fresh directory, then reports, with one line per step:

* ``up_empty_s``: start-up of the empty cluster;
* ``create_s``: creating the topic (REST answer), ``ready_s``: until every
  broker's metadata shows a leader for every partition and each leader accepts
  a write (one acks=all record per partition, each partition's high watermark
  then 1, by ListOffsets);
* idle CPU (% of one core) and RSS of each broker and controller over
  ``--idle-seconds`` with no traffic;
* ``failover_elected_s`` / ``failover_s``: SIGKILL of the active controller until
  the standby is the active one in etcd / until it answers a describe of the topic;
* ``restart_up_s``: stop everything and ``up`` again on the same data, until
  every partition has a leader again and takes a second record;
* ``idle_after_restart``: idle CPU/RSS over ``--idle-seconds`` right after that;
* ``restart_settled_s``: seconds after the end of ``restart_up_s`` from which every broker's CPU
  stayed under 5 % of a core for 3 s in a row (None if not within 2 minutes after
  ``idle_after_restart``), with ``restart_cpu_timeline`` (each broker's CPU, second by second, from the
  end of ``restart_up_s`` until then), then ``idle_after_settled``: idle CPU/RSS over
  ``--idle-seconds`` once settled.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from typing import Any

import click
import grpc
import httpx

from shared.cli.launcher import ClusterSpec, LocalCluster
from shared.client import Consumer, Producer, TopicPartition
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.security.transport import sync_channel

CLK_TCK = os.sysconf("SC_CLK_TCK")
#: A broker has settled after a restart once its CPU stays under this (% of a core) ...
SETTLED_CPU_PCT = 5.0
#: ... for this many consecutive seconds (all brokers at once).
SETTLE_WINDOW_S = 3
#: How long to wait for that after ``idle_after_restart`` before reporting it as not settled (s).
SETTLE_MAX_S = 120.0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _until(pred: Any, timeout: float, what: str) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if pred():
                return time.monotonic() - t0
        except (grpc.RpcError, httpx.HTTPError, OSError, KeyError):
            pass
        time.sleep(0.2)
    raise click.ClickException(f"timed out after {timeout:.0f}s waiting for {what}")


def _all_led(lc: LocalCluster, topic: str, partitions: int) -> bool:
    for proc in (p for p in lc.procs if p.role == "broker"):
        with sync_channel(proc.address) as ch:
            t = pb_grpc.BrokerStub(ch).Metadata(pb.MetadataRequest(topics=[topic]), timeout=10).topics[0]
        if len(t.partitions) != partitions or any(p.leader < 0 for p in t.partitions):
            return False
    return True


def _write_and_read_each(bootstrap: str, topic: str, partitions: int, expected_end: int = 1) -> None:
    producer = Producer(bootstrap, acks=-1, linger_ms=5)
    futures = [producer.send(topic, b"x", partition=p) for p in range(partitions)]
    for f in futures:
        f.get(120)
    producer.close()
    consumer = Consumer(bootstrap)
    pending = [TopicPartition(topic, p) for p in range(partitions)]
    deadline = time.monotonic() + 120
    while pending and time.monotonic() < deadline:  # a leader elected meanwhile may lag a moment
        ends = consumer.end_offsets(pending)
        pending = [tp for tp, end in ends.items() if end != expected_end]
        if pending:
            time.sleep(0.5)
    consumer.close()
    if pending:
        raise click.ClickException(f"{len(pending)} partitions do not show the record at their high watermark")


def _idle(lc: LocalCluster, seconds: float) -> dict[str, dict[str, float]]:
    procs = [p for p in lc.procs if p.role in ("broker", "controller") and p.popen and p.popen.poll() is None]
    before = {p.pid: cpu_seconds(p.pid) for p in procs}
    time.sleep(seconds)
    return {f"{p.role}-{p.id}": {"cpu_pct": round(100 * (cpu_seconds(p.pid) - before[p.pid]) / seconds, 2),
                                 "rss_mib": round(rss_mib(p.pid), 1)} for p in procs}


def _after_restart(lc: LocalCluster, idle_seconds: float) -> tuple[dict[str, dict[str, float]], float | None,
                                                                    dict[str, list[float]]]:
    """Sampled once a second from the moment the restarted cluster is up: ``idle_after_restart`` (as
    ``_idle`` over the first ``idle_seconds``), when the brokers settled (the start of the first
    ``SETTLE_WINDOW_S`` seconds in which every broker stayed under ``SETTLED_CPU_PCT``; None if not
    within ``SETTLE_MAX_S`` more seconds) and each broker's CPU second by second until then."""
    procs = [p for p in lc.procs if p.role in ("broker", "controller") and p.popen and p.popen.poll() is None]
    first = {p.pid: cpu_seconds(p.pid) for p in procs}
    last = dict(first)
    timeline: dict[str, list[float]] = {f"{p.role}-{p.id}": [] for p in procs if p.role == "broker"}
    idle: dict[str, dict[str, float]] | None = None
    settled: float | None = None
    t0 = last_t = time.monotonic()
    tick = 0
    while idle is None or (settled is None and tick < idle_seconds + SETTLE_MAX_S):
        tick += 1
        time.sleep(max(0.0, t0 + tick - time.monotonic()))
        now = time.monotonic()
        cpu = {p.pid: cpu_seconds(p.pid) for p in procs}
        for p in procs:
            if p.role == "broker":
                timeline[f"broker-{p.id}"].append(round(100 * (cpu[p.pid] - last[p.pid]) / (now - last_t), 1))
        last, last_t = cpu, now
        if idle is None and tick >= idle_seconds:
            idle = {f"{p.role}-{p.id}": {"cpu_pct": round(100 * (cpu[p.pid] - first[p.pid]) / (now - t0), 2),
                                         "rss_mib": round(rss_mib(p.pid), 1)} for p in procs}
        if settled is None and tick >= SETTLE_WINDOW_S and all(
                sum(v[-SETTLE_WINDOW_S:]) / SETTLE_WINDOW_S < SETTLED_CPU_PCT for v in timeline.values()):
            settled = float(tick - SETTLE_WINDOW_S)
    assert idle is not None
    return idle, settled, timeline


def _failover(lc: LocalCluster, topic: str) -> tuple[float, float]:
    view = httpx.get(f"{lc.describe()['rest']}/v1/cluster", timeout=10).json()
    active = view["controller"]["id"]
    victim = next(p for p in lc.procs if p.role == "controller" and p.id == str(active))
    other = next(p for p in lc.procs if p.role == "controller" and p.id != str(active))
    os.kill(victim.pid, signal.SIGKILL)
    t0 = time.monotonic()

    def elected() -> bool:
        v = httpx.get(f"{other.info['rest']}/v1/cluster", timeout=5).json()
        return bool(v["controller"]) and v["controller"]["id"] != active

    _until(elected, 60, "a new active controller")
    elected_s = time.monotonic() - t0
    _until(lambda: httpx.get(f"{other.info['rest']}/v1/topics/{topic}", timeout=10).status_code == 200, 60,
           "the new controller to describe the topic")
    return elected_s, time.monotonic() - t0


@click.command("partitions")
@click.option("--partitions", type=click.IntRange(1, 10_000), default=5_000, show_default=True)
@click.option("--brokers", type=click.IntRange(1, 9), default=3, show_default=True)
@click.option("--replication-factor", type=click.IntRange(1, 9), default=1, show_default=True)
@click.option("--idle-seconds", type=click.FloatRange(1, 600), default=20.0, show_default=True)
@click.option("--session-timeout-ms", type=click.IntRange(2000), default=6000, show_default=True)
@click.option("--data-dir", default=None, type=click.Path(file_okay=False), help="default: a temp dir, removed after")
@click.option("--json", "as_json", is_flag=True)
def bench_partitions(partitions: int, brokers: int, replication_factor: int, idle_seconds: float,
                     session_timeout_ms: int, data_dir: str | None, as_json: bool) -> None:
    """A local cluster holding thousands of partitions: creation, idle CPU/RSS, failover, restart."""
    directory = data_dir or tempfile.mkdtemp(prefix="tidelog-bench-partitions-")
    spec = ClusterSpec(data_dir=directory, controllers=2, brokers=brokers, coordinators=0, cleaners=0, quotas=0,
                       session_timeout_ms=session_timeout_ms)
    topic = "bench-partitions"
    out: dict[str, Any] = {"partitions": partitions, "brokers": brokers, "replication_factor": replication_factor}

    def step(name: str, value: Any) -> None:
        out[name] = value
        if not as_json:
            click.echo(f"{name}: {value}")

    lc = LocalCluster(spec)
    try:
        t0 = time.monotonic()
        lc.start(timeout=120)
        step("up_empty_s", round(time.monotonic() - t0, 2))
        rest = lc.describe()["rest"]
        t0 = time.monotonic()
        r = httpx.post(f"{rest}/v1/topics", json={"name": topic, "partitions": partitions,
                                                   "replication_factor": replication_factor}, timeout=600)
        if r.status_code != 201:
            raise click.ClickException(f"create failed: {r.status_code} {r.text[:300]}")
        step("create_s", round(time.monotonic() - t0, 2))
        _until(lambda: _all_led(lc, topic, partitions), 600, "leaders for every partition")
        bootstrap = ",".join(p.address for p in lc.procs if p.role == "broker")
        _write_and_read_each(bootstrap, topic, partitions)
        step("ready_s", round(time.monotonic() - t0, 2))
        step("idle", _idle(lc, idle_seconds))
        elected_s, answered_s = _failover(lc, topic)
        step("failover_elected_s", round(elected_s, 2))
        step("failover_s", round(answered_s, 2))
        lc.stop()
        lc = LocalCluster(spec)
        t0 = time.monotonic()
        lc.start(timeout=600)
        _until(lambda: _all_led(lc, topic, partitions), 600, "leaders after the restart")
        bootstrap = ",".join(p.address for p in lc.procs if p.role == "broker")
        _write_and_read_each(bootstrap, topic, partitions, expected_end=2)  # every log open and writable
        step("restart_up_s", round(time.monotonic() - t0, 2))
        # Right after the restart, then until the brokers settle (ISR expansions, elections, checkpoints).
        idle, settled, timeline = _after_restart(lc, idle_seconds)
        step("idle_after_restart", idle)
        step("restart_settled_s", settled)
        step("restart_cpu_timeline", timeline)
        step("idle_after_settled", _idle(lc, idle_seconds))
    finally:
        lc.stop()
        if data_dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    if as_json:
        click.echo(json.dumps(out))
