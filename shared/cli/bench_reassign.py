"""``tidelog bench reassign``: grow a loaded cluster from 3 to 5 brokers by a reassignment, measured.

For each round (unthrottled, then with ``--throttle``), on a fresh local cluster in a temp directory
(etcd, 1 controller, 3 brokers, no other roles; the balancer off, so that the moves measured are the
generated plan's):

1. create ``--partitions`` partitions at ``--replication-factor`` and fill them with ``--megabytes`` MB
   (acks=all), then start a background acks=all producer at ``--load-rate`` records/s of 1 KiB into a
   separate 6-partition topic on the first three brokers (it is not moved: it measures how producing
   fares while the brokers replicate, without growing the data being moved);
2. measure the background producer for ``--before-seconds`` (throughput and ack latency "before");
3. start two more brokers (as ``tidelog brokers add`` does), generate a plan over all five brokers
   (``tidelog reassign generate``'s controller call), execute it (``--throttle`` sets Kafka's
   replication throttles, as ``tidelog reassign execute --throttle``) and poll ``verify`` until done;
4. report: time to balance, bytes moved (each added replica's size on its leader's disk when the plan
   started), moved bytes/s in total and into each new broker, the latter against the throttle (the
   throttle is per broker, as Kafka's: each new broker's follower rate is held to it), replica and
   leader counts per broker afterwards with their skew (max - min), and the background producer's
   throughput and latency during the move against before it.

The figures are indicative on a shared machine; the sizes can be scaled down with ``--megabytes``.
"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import shutil
import tempfile
import threading
import time
from collections import Counter
from typing import Any

import click

from shared.cli.bench import percentiles
from shared.cli.launcher import ClusterSpec, LocalCluster
from shared.cli.reassign import _rest, apply_throttle, clear_throttle, execute_plan, plan_targets, verify_plan
from shared.client import Admin, Producer

LOAD_TOPIC = "bench-reassign-load"
LOAD_RECORD = 1024


class Load:
    """A rate-limited acks=all producer recording (ack time, latency, bytes) of every acknowledged send."""

    def __init__(self, bootstrap: str, topic: str, rate: float) -> None:
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.acks: list[tuple[float, float]] = []  # (acknowledged at, latency ms)
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        producer = Producer(self.bootstrap, acks="all", linger_ms=5, request_timeout_ms=10_000)
        value = os.urandom(LOAD_RECORD)
        t0 = time.monotonic()
        n = 0
        try:
            while not self._stop.is_set():
                sent = time.monotonic()

                def ok(_md: Any, sent: float = sent) -> None:
                    now = time.monotonic()
                    self.acks.append((now, (now - sent) * 1000))

                def bad(_exc: BaseException) -> None:
                    self.errors += 1

                producer.send(self.topic, value).add_callback(ok).add_errback(bad)
                n += 1
                ahead = n / self.rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
            producer.flush(30)
        finally:
            producer.close()

    def window(self, start: float, end: float) -> dict[str, Any]:
        got = [lat for t, lat in self.acks if start <= t < end]
        span = max(end - start, 1e-9)
        lat = percentiles(got)
        return {"records_per_s": round(len(got) / span, 1), "mb_per_s": round(len(got) * LOAD_RECORD / span / 1e6, 3),
                "p50_ms": round(lat["p50"], 1), "p99_ms": round(lat["p99"], 1)}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def _until(pred: Any, timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except Exception:  # noqa: BLE001 - a cluster settling: ask again
            pass
        time.sleep(interval)
    raise click.ClickException(f"timed out after {timeout:.0f}s waiting for {what}")


def _full_isr(admin: Admin, topic: str, rf: int) -> bool:
    return all(len(p["isr"]) == rf and p["leader"] >= 0 for p in admin.describe_topic(topic)["partitions"])


def _log_bytes(data_dir: str, broker: int, topic: str, partition: int) -> int:
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(data_dir, f"broker-{broker}", f"{topic}-{partition}",
                                                                  "*.log")))


def _fill(bootstrap: str, topic: str, partitions: int, total_bytes: int, record_size: int) -> float:
    """Send ``total_bytes`` of ``record_size``-byte records round-robin; return MB/s."""
    value = os.urandom(record_size)
    n = max(partitions, total_bytes // record_size)
    t0 = time.monotonic()
    with Producer(bootstrap, acks="all", linger_ms=20, batch_size=512 << 10, max_request_size=4 << 20) as producer:
        window: list[Any] = []
        for i in range(n):
            window.append(producer.send(topic, value, partition=i % partitions))
            if len(window) >= 2000:
                for f in window:
                    f.get(120)
                window = []
        for f in window:
            f.get(120)
    return n * record_size / (time.monotonic() - t0) / 1e6


def _round(throttle: int | None, args: dict[str, Any], say: Any) -> dict[str, Any]:
    directory = tempfile.mkdtemp(prefix="tidelog-bench-reassign-")
    spec = ClusterSpec(data_dir=directory, controllers=1, brokers=3, coordinators=0, cleaners=0, quotas=0,
                       extra_env={"TIDELOG_BALANCER_ENABLE": "false"})  # the moves measured are the plan's
    lc = LocalCluster(spec)
    topic = "bench-reassign"
    partitions, rf = args["partitions"], args["replication_factor"]
    out: dict[str, Any] = {"throttle_bytes_per_s": throttle}
    load: Load | None = None
    admin: Admin | None = None
    ok = False
    try:
        lc.start(timeout=120)
        bootstrap = ",".join(p.address for p in lc.procs if p.role == "broker")
        admin = Admin(bootstrap)
        admin.create_topic(topic, partitions, rf, {"max.message.bytes": str(8 << 20)})
        admin.create_topic(LOAD_TOPIC, 6, min(rf, 3))
        _until(lambda: _full_isr(admin, topic, rf) and _full_isr(admin, LOAD_TOPIC, min(rf, 3)), 120, "full ISR")
        say(f"[{'throttled' if throttle else 'unthrottled'}] filling {args['megabytes']} MB into {partitions} "
            f"partitions (RF {rf}) on 3 brokers ...")
        out["fill_mb_per_s"] = round(_fill(bootstrap, topic, partitions, args["megabytes"] * 1_000_000,
                                           args["record_size"]), 1)
        _until(lambda: _full_isr(admin, topic, rf), 300, "full ISR after the fill")
        load = Load(bootstrap, LOAD_TOPIC, args["load_rate"])
        load.start()
        time.sleep(1.0)  # connected and warm
        t_before = time.monotonic()
        time.sleep(args["before_seconds"])
        before_end = time.monotonic()
        out["produce_before"] = load.window(t_before, before_end)

        # 3 -> 5 brokers, as `tidelog brokers add --count 2` does.
        new = [lc.start_service("broker", 4), lc.start_service("broker", 5)]
        lc.wait_ready(new, 60)
        _until(lambda: {4, 5} <= {int(b["id"]) for b in admin.cluster()["brokers"]}, 60, "brokers 4 and 5")
        brokers = [1, 2, 3, 4, 5]
        plan = _rest(admin, "POST", "/v1/reassignments/generate", {"topics": [topic], "broker_list": brokers})["proposed"]
        rows = {p["partition"]: p for p in admin.describe_topic(topic)["partitions"]}
        moves: dict[int, list[int]] = {}  # partition -> replicas added
        into: Counter[int] = Counter()  # bytes each broker receives
        out_of: Counter[int] = Counter()  # bytes each broker sends (the leader of a moving partition)
        senders: dict[int, int] = {}
        moved = 0
        for (_, p), target in plan_targets(plan).items():
            added = [b for b in target if b not in rows[p]["replicas"]]
            if added:
                size = _log_bytes(directory, rows[p]["leader"], topic, p)
                moves[p] = added
                moved += size * len(added)
                for b in added:
                    into[b] += size
                out_of[rows[p]["leader"]] += size * len(added)
                senders[p] = rows[p]["leader"]
        plan = {"version": 1, "partitions": [e for e in plan["partitions"] if e["partition"] in moves]}
        out["partitions_moved"] = len(moves)
        out["replicas_moved"] = sum(len(a) for a in moves.values())
        out["bytes_moved"] = moved
        say(f"moving {out['replicas_moved']} replicas ({moved / 1e6:.0f} MB) of {len(moves)} partitions"
            + (f" at a throttle of {throttle / 1e6:.1f} MB/s per broker" if throttle else " unthrottled") + " ...")
        t0 = time.monotonic()
        if throttle:  # before the reassignment starts, as Kafka's execute does (reassign.py sets it after)
            apply_throttle(admin, throttle, {(topic, p): (added, list(rows[p]["replicas"])) for p, added in moves.items()})
        with contextlib.redirect_stdout(io.StringIO()):
            execute_plan(admin, plan, None)
        done_at: dict[int, float] = {}
        deadline = t0 + args["timeout"]
        while len(done_at) < len(moves):
            pending = {p for _, p in verify_plan(admin, plan)[0]}
            now = time.monotonic()
            for p in moves:
                if p not in pending and p not in done_at:
                    done_at[p] = now - t0
            if now > deadline:
                raise click.ClickException(f"the reassignment did not finish within {args['timeout']:.0f}s "
                                           f"({len(moves) - len(done_at)} partitions left)")
            time.sleep(0.25)
        elapsed = time.monotonic() - t0
        during_end = time.monotonic()
        out["produce_during"] = load.window(t0, during_end)
        if throttle:
            clear_throttle(admin, set(brokers), {topic})
        out["balance_s"] = round(elapsed, 2)
        out["moved_mb_per_s"] = round(moved / elapsed / 1e6, 2)
        per_broker = {}
        for b, size in sorted(into.items()):
            span = max(done_at[p] for p, added in moves.items() if b in added)
            per_broker[b] = round(size / span / 1e6, 2)
        out["into_broker_mb_per_s"] = per_broker
        sending = {}
        for b, size in sorted(out_of.items()):
            span = max(done_at[p] for p, leader in senders.items() if leader == b)
            sending[b] = round(size / span / 1e6, 2)
        out["out_of_broker_mb_per_s"] = sending
        if throttle:  # the busiest broker's throttled direction (each broker's in and out are limited)
            busiest = max([*per_broker.values(), *sending.values()], default=0.0)
            out["new_brokers_vs_throttle"] = round(max(per_broker.get(4, 0), per_broker.get(5, 0)) * 1e6 / throttle, 2)
            out["busiest_vs_throttle"] = round(busiest * 1e6 / throttle, 2)
        final = admin.describe_topic(topic)["partitions"]
        replicas = Counter(b for p in final for b in p["replicas"])
        leaders = Counter(p["leader"] for p in final)
        out["replicas_per_broker"] = {b: replicas.get(b, 0) for b in brokers}
        out["leaders_per_broker"] = {b: leaders.get(b, 0) for b in brokers}
        out["replica_skew"] = max(out["replicas_per_broker"].values()) - min(out["replicas_per_broker"].values())
        out["leader_skew"] = max(out["leaders_per_broker"].values()) - min(out["leaders_per_broker"].values())
        # Leadership follows the preferred replicas once a preferred election runs (auto.leader.rebalance
        # does it every leader.imbalance.check.interval.seconds; kafka-leader-election.sh on demand).
        t_elect = time.monotonic()
        _rest(admin, "POST", "/v1/elect-leaders", {"topic": topic})
        out["preferred_election_s"] = round(time.monotonic() - t_elect, 2)
        elected = Counter(p["leader"] for p in admin.describe_topic(topic)["partitions"])
        out["leaders_after_election"] = {b: elected.get(b, 0) for b in brokers}
        out["produce_errors"] = load.errors
        ok = True
    finally:
        if load is not None:
            load.stop()
        if admin is not None:
            admin.close()
        lc.stop()
        if ok:
            shutil.rmtree(directory, ignore_errors=True)
        else:
            click.echo(f"kept {directory} (logs in {directory}/logs)", err=True)
    return out


def _table(rounds: list[dict[str, Any]]) -> str:
    def fmt_load(w: dict[str, Any]) -> str:
        return f"{w['records_per_s']:.0f} rec/s, p99 {w['p99_ms']:.0f} ms"

    rows = [("round", [("throttled " + f"{r['throttle_bytes_per_s'] / 1e6:g} MB/s") if r["throttle_bytes_per_s"]
                       else "unthrottled" for r in rounds])]
    rows += [
        ("fill (MB/s)", [f"{r['fill_mb_per_s']}" for r in rounds]),
        ("replicas moved", [f"{r['replicas_moved']} of {r['partitions_moved']} partitions" for r in rounds]),
        ("bytes moved (MB)", [f"{r['bytes_moved'] / 1e6:.0f}" for r in rounds]),
        ("time to balance (s)", [f"{r['balance_s']}" for r in rounds]),
        ("moved, total (MB/s)", [f"{r['moved_mb_per_s']}" for r in rounds]),
        ("into each new broker (MB/s)", [", ".join(f"{b}: {v}" for b, v in r["into_broker_mb_per_s"].items())
                                         for r in rounds]),
        ("out of each broker (MB/s)", [", ".join(f"{b}: {v}" for b, v in r["out_of_broker_mb_per_s"].items())
                                       for r in rounds]),
        ("new brokers' rate / throttle", [f"{r['new_brokers_vs_throttle']}" if "new_brokers_vs_throttle" in r else "-"
                                          for r in rounds]),
        ("busiest broker / throttle", [f"{r['busiest_vs_throttle']}" if "busiest_vs_throttle" in r else "-"
                                       for r in rounds]),
        ("replicas per broker", [" ".join(str(v) for v in r["replicas_per_broker"].values()) for r in rounds]),
        ("replica skew (max-min)", [str(r["replica_skew"]) for r in rounds]),
        ("leaders per broker", [" ".join(str(v) for v in r["leaders_per_broker"].values()) for r in rounds]),
        ("leaders after preferred election", [" ".join(str(v) for v in r["leaders_after_election"].values())
                                              for r in rounds]),
        ("produce before", [fmt_load(r["produce_before"]) for r in rounds]),
        ("produce during the move", [fmt_load(r["produce_during"]) for r in rounds]),
        ("produce errors", [str(r["produce_errors"]) for r in rounds]),
    ]
    width = max(len(k) for k, _ in rows)
    cols = [max(len(v[i]) for _, v in rows) for i in range(len(rounds))]
    return "\n".join(f"{k:<{width}}  " + "  ".join(f"{v:<{cols[i]}}" for i, v in enumerate(vals)) for k, vals in rows)


@click.command("reassign")
@click.option("--megabytes", type=click.IntRange(1), default=1000, show_default=True,
              help="data written before the move (before replication)")
@click.option("--partitions", type=click.IntRange(1, 10_000), default=60, show_default=True)
@click.option("--replication-factor", type=click.IntRange(1, 3), default=2, show_default=True)
@click.option("--record-size", type=click.IntRange(1, 4 << 20), default=16_384, show_default=True)
@click.option("--throttle", type=click.IntRange(1), default=20_000_000, show_default=True, metavar="BYTES_PER_S",
              help="replication throttle of the second round (per broker, as Kafka's)")
@click.option("--rounds", "which", type=click.Choice(["both", "unthrottled", "throttled"]), default="both",
              show_default=True)
@click.option("--load-rate", type=click.FloatRange(1), default=500, show_default=True,
              help="background acks=all producer, 1 KiB records/s")
@click.option("--before-seconds", type=click.FloatRange(1), default=5.0, show_default=True)
@click.option("--timeout", type=click.FloatRange(10), default=1800.0, show_default=True,
              help="seconds to wait for one round's reassignment")
@click.option("--json", "as_json", is_flag=True)
def bench_reassign(megabytes: int, partitions: int, replication_factor: int, record_size: int, throttle: int,
                   which: str, load_rate: float, before_seconds: float, timeout: float, as_json: bool) -> None:
    """3 -> 5 brokers under load: time to balance unthrottled and throttled, moved bytes/s against the
    throttle, replica skew afterwards, produce throughput during the move against before it."""
    args = {"megabytes": megabytes, "partitions": partitions, "replication_factor": replication_factor,
            "record_size": record_size, "load_rate": load_rate, "before_seconds": before_seconds, "timeout": timeout}

    def say(msg: str) -> None:
        if not as_json:
            click.echo(msg, err=True)

    rounds = []
    if which in ("both", "unthrottled"):
        rounds.append(_round(None, args, say))
    if which in ("both", "throttled"):
        rounds.append(_round(throttle, args, say))
    if as_json:
        click.echo(json.dumps({"megabytes": megabytes, "partitions": partitions,
                               "replication_factor": replication_factor, "rounds": rounds}))
    else:
        click.echo(f"tidelog bench reassign: {megabytes} MB in {partitions} partitions, RF {replication_factor}, "
                   f"3 -> 5 brokers; background load {load_rate:g} x 1 KiB records/s (acks=all)")
        click.echo(_table(rounds))
