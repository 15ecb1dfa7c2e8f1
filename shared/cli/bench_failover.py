"""``tidelog bench failover``: how long producing stalls when a partition leader is killed or shut down.

Runs against a local cluster started with ``tidelog up --detach`` (it needs the
process table in cluster.json to stop and restart the leader). An idempotent
acks=all producer sends to one partition at a steady rate; the leader is
killed (SIGKILL) or stopped cleanly (SIGTERM: controlled shutdown); the stall is
the longest gap between consecutive acknowledgements around the event.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import click

from shared.cli.bench import _ensure_topic, percentiles
from shared.cli.connect import data_dir_option
from shared.cli.launcher import read_cluster_file, write_cluster_file
from shared.client import Admin, Producer


def _wait(pred, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return True
        except Exception:
            pass
        time.sleep(0.1)
    return False


@click.command("failover")
@click.option("--topic", default="failover-bench", show_default=True)
@click.option("--mode", type=click.Choice(["kill", "shutdown"]), default="kill", show_default=True)
@click.option("--rate", type=float, default=2000, show_default=True, help="records/s sent during the test")
@click.option("--rounds", type=click.IntRange(1), default=3, show_default=True)
@data_dir_option()
@click.option("--json", "as_json", is_flag=True)
def bench_failover(topic: str, mode: str, rate: float, rounds: int, data_dir: str, as_json: bool) -> None:
    """Produce-stall time when the leader is killed -9 (kill) or stopped with SIGTERM (shutdown)."""
    info = read_cluster_file(os.path.abspath(data_dir))
    if info is None:
        raise click.ClickException(f"no cluster.json in {os.path.abspath(data_dir)}: bench failover kills and restarts "
                                   "a local cluster's processes; start one with `tidelog up --detach` (--data-dir / "
                                   "TIDELOG_DATA_DIR)")
    brokers = {int(p["id"]): p for p in info["processes"] if p["role"] == "broker"}
    if len(brokers) < 2:
        raise click.ClickException("needs at least 2 brokers")
    bootstrap = ",".join(p["address"] for p in brokers.values())
    rf = min(3, len(brokers))
    _ensure_topic(bootstrap, topic, 1, rf, 1 << 20)
    admin = Admin(bootstrap)
    acks: list[float] = []
    stop = threading.Event()
    errors: list[BaseException] = []
    producer = Producer(bootstrap, acks="all", linger_ms=1, request_timeout_ms=5000, retry_backoff_ms=20)

    def run() -> None:
        t0 = time.monotonic()
        n = 0
        while not stop.is_set():
            producer.send(topic, b"x" * 100, partition=0).add_callback(
                lambda _md: acks.append(time.monotonic())).add_errback(errors.append)
            n += 1
            ahead = n / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    stalls = []
    try:
        _wait(lambda: all(len(p["isr"]) == rf for p in admin.describe_topic(topic)["partitions"]), 30)
        for _ in range(rounds):
            time.sleep(1.5)
            leader = admin.describe_topic(topic)["partitions"][0]["leader"]
            victim = brokers[leader]
            t_event = time.monotonic()
            os.kill(victim["pid"], signal.SIGKILL if mode == "kill" else signal.SIGTERM)
            _wait(lambda old=leader: admin.describe_topic(topic)["partitions"][0]["leader"] not in (old, -1), 30)
            time.sleep(1.0)
            window = [t for t in acks if t >= t_event - 1.0]
            before = [t for t in window if t < t_event]
            after = [t for t in window if t >= t_event]
            last_before = before[-1] if before else t_event
            first_after = after[0] if after else time.monotonic()
            stalls.append((first_after - last_before) * 1000)
            argv = list(victim["argv"])
            if "--port" in argv:  # restart it on its old port so clients and cluster.json stay right
                argv[argv.index("--port") + 1] = victim["address"].rpartition(":")[2]
            victim["argv"] = argv
            with open(victim["log"], "ab") as logf:
                popen = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
            victim["pid"] = popen.pid
            write_cluster_file(os.path.abspath(data_dir), info)
            _wait(lambda: all(len(p["isr"]) == rf for p in admin.describe_topic(topic)["partitions"]), 60)
    finally:
        stop.set()
        thread.join(10)
        producer.close(30)
        admin.close()
    res = {"mode": mode, "rounds": rounds, "stall_ms": [round(s, 1) for s in stalls],
           "max_stall_ms": round(max(stalls), 1), "errors": len(errors), "summary": percentiles(stalls)}
    if as_json:
        click.echo(json.dumps(res))
    else:
        click.echo(f"{mode}: produce stalled {', '.join(f'{s:.0f} ms' for s in stalls)} "
                   f"(max {max(stalls):.0f} ms) across {rounds} leader {'kills' if mode == 'kill' else 'shutdowns'}; "
                   f"{len(errors)} send errors")
