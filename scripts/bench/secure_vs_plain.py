"""Issue 23's benchmark: produce and consume with TLS, SCRAM and 1,000 ACLs against plaintext without ACLs.

    python scripts/bench/secure_vs_plain.py [--rounds 3] [--records 300000] [--door grpc|kafka|both]
                                            [--acls 1000] [--secure-user bench|admin]

Starts two one-broker clusters side by side (``tidelog up --detach``: 1 controller, 1 broker, 1 coordinator;
one of them ``--secure``) in a temporary directory. On the secure one, as its admin, it creates the SCRAM-SHA-512
user ``bench`` and ``--acls`` ACL bindings: the five the bench needs (TOPIC ``bench-`` PREFIXED: WRITE, READ,
DESCRIBE, CREATE; GROUP ``bench-`` PREFIXED: READ) and the rest for other principals and resources (literal and
prefixed topics and groups, ALLOW and DENY, some for ``User:bench`` on other topics), so that every decision goes
through an authorizer holding that many bindings. Then, per round and per door, ``tidelog bench produce`` then
``tidelog bench consume`` (1 KiB values, 16-byte keys, acks=1: the bench defaults, the same on both sides; a
fresh topic each run) on one cluster, then the other: plain first in odd rounds, secure first in even ones
(interleaved, and neither side always goes first). The secure runs authenticate as ``bench``
(``TIDELOG_SASL_USERNAME`` / ``TIDELOG_SASL_PASSWORD``: SASL_SSL, SCRAM-SHA-512; over gRPC and, with
``--door kafka|both``, the Kafka listener through confluent-kafka). ``--secure-user admin`` runs them as the
admin instead (a super user: no ACL is consulted), to tell the cost of TLS + SCRAM from that of the ACLs.

Prints every run (records/s, MB/s, p50/p99 latency: per sampled send for produce, per poll for consume), the
secure/plain ratio of each round and the median ratio per door and direction. Every run is printed: on a shared
machine, read the spread too. Both clusters are stopped at the end, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from shared.cli.connect import client_settings  # noqa: E402
from shared.client import Admin  # noqa: E402

BENCH_USER = "bench"
PREFIX = "bench-"
SHAPE = ["--brokers", "1", "--controllers", "1", "--coordinators", "1", "--cleaners", "0", "--quotas", "0",
         "--consoles", "0"]


def binding(principal: str, operation: str, rtype: str, name: str, *, pattern: str = "LITERAL",
            permission: str = "ALLOW", host: str = "*") -> dict[str, str]:
    return {"resource_type": rtype, "resource_name": name, "pattern_type": pattern, "principal": principal,
            "host": host, "operation": operation, "permission_type": permission}


def bench_acls(total: int) -> list[dict[str, str]]:
    """The bench user's five bindings, then ``total - 5`` others (a realistic mix), ``total`` in all."""
    me = f"User:{BENCH_USER}"
    need = [binding(me, op, "TOPIC", PREFIX, pattern="PREFIXED") for op in ("WRITE", "READ", "DESCRIBE", "CREATE")]
    need.append(binding(me, "READ", "GROUP", PREFIX, pattern="PREFIXED"))
    ops = ("READ", "WRITE", "DESCRIBE", "ALL", "ALTER_CONFIGS", "DELETE")
    others: list[dict[str, str]] = []
    i = 0
    while len(need) + len(others) < total:
        if i % 20 == 0:  # the bench user on topics that are not its own
            others.append(binding(me, "READ", "TOPIC", f"other-{i}"))
        elif i % 4 == 0:
            others.append(binding(f"User:app{i % 300}", "READ", "GROUP", f"team{i % 37}-group-{i}",
                                  pattern="PREFIXED" if i % 3 == 0 else "LITERAL"))
        else:
            others.append(binding(
                f"User:app{i % 300}", ops[i % len(ops)] if i % 6 else "WRITE", "TOPIC", f"team{i % 37}-topic-{i}",
                pattern="PREFIXED" if i % 3 == 0 else "LITERAL", permission="DENY" if i % 10 == 1 else "ALLOW",
                host="*" if i % 7 else f"10.1.{i % 250}.{i % 200}"))
        i += 1
    return (need + others)[:total] if total >= len(need) else need


def tidelog(*args: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([os.environ.get("TIDELOG", "tidelog"), *args], capture_output=True, text=True, env=env,
                          check=check)


def start(data_dir: str, secure: bool) -> None:
    proc = tidelog("up", "--detach", "--data-dir", data_dir, *SHAPE, *(["--secure"] if secure else []), check=False)
    if proc.returncode:
        raise SystemExit(f"tidelog up {'--secure ' if secure else ''}failed:\n{proc.stdout}{proc.stderr}")


def stop(data_dir: str) -> None:
    if os.path.exists(os.path.join(data_dir, "cluster.json")):
        tidelog("down", "--data-dir", data_dir, check=False)


def setup_secure(data_dir: str, acl_count: int) -> str:
    """As the admin: the user ``bench`` (SCRAM-SHA-512) and the ACLs; returns its password."""
    info = json.load(open(os.path.join(data_dir, "cluster.json")))
    password = secrets.token_urlsafe(18)
    servers = ",".join(p["client_address"] for p in info["processes"] if p["role"] == "broker")
    with Admin(servers, rest_url=info["rest"], **client_settings(data_dir)) as admin:
        admin._call("POST", "/v1/users", json={"name": BENCH_USER, "password": password,  # noqa: SLF001
                                               "mechanism": "SCRAM-SHA-512"})
        acls = bench_acls(acl_count)
        for k in range(0, len(acls), 250):
            admin._call("POST", "/v1/acls", json={"acls": acls[k:k + 250]})  # noqa: SLF001
        listed = admin._call("GET", "/v1/acls")  # noqa: SLF001
    n = len(listed.get("acls", listed) if isinstance(listed, dict) else listed)
    print(f"secure cluster: user {BENCH_USER} (SCRAM-SHA-512), {n} ACL bindings", flush=True)
    return password


def run(kind: str, door: str, data_dir: str, topic: str, records: int, env: dict[str, str]) -> dict[str, Any]:
    args = ["bench", kind, "--data-dir", data_dir, "--topic", topic, "--records", str(records), "--door", door,
            "--no-progress", "--json"]
    if kind == "produce":
        args += ["--record-size", "1024", "--key-size", "16", "--acks", "1"]
    elif door == "grpc":  # a plaintext consumer would fetch over the Kafka listener; a secure one never does
        args += ["--fetch-transport", "grpc"]
    proc = tidelog(*args, env=env, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit {proc.returncode}"]}
    return json.loads(lines[-1])


def line(res: dict[str, Any]) -> str:
    if "error" in res:
        return f"FAILED {res['error']}"
    lat = res["latency_ms"]
    cpu, client = res.get("broker_cpu_us_per_record"), res.get("client_cpu_us_per_record")
    return (f"{res['records_per_s']:>9,.0f} rec/s {res['mb_per_s']:7.1f} MB/s  p50 {lat['p50']:7.2f} ms  "
            f"p99 {lat['p99']:7.2f} ms" + (f"  CPU/rec: broker {cpu:5.2f} us" if cpu is not None else "")
            + (f", client {client:5.2f} us" if client is not None else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--door", choices=("grpc", "kafka", "both"), default="grpc",
                    help="gRPC (Tidelog's client), the Kafka listener (confluent-kafka), or both")
    ap.add_argument("--acls", type=int, default=1000, help="ACL bindings on the secure cluster (>= 5)")
    ap.add_argument("--secure-user", choices=(BENCH_USER, "admin"), default=BENCH_USER,
                    help="who the secure runs authenticate as (admin: a super user, no ACL consulted)")
    ap.add_argument("--json", dest="json_out", default=None, help="also write every run to this JSON file")
    args = ap.parse_args()
    doors = ["grpc", "kafka"] if args.door == "both" else [args.door]

    base = tempfile.mkdtemp(prefix="secure-vs-plain-")
    dirs = {"plain": os.path.join(base, "plain"), "secure": os.path.join(base, "secure")}

    def on_signal(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    env_plain = {k: v for k, v in os.environ.items() if not k.startswith(("TIDELOG_SASL_", "TIDELOG_SSL_"))}
    env_plain.pop("TIDELOG_DATA_DIR", None)
    results: list[dict[str, Any]] = []
    try:
        start(dirs["plain"], secure=False)
        start(dirs["secure"], secure=True)
        password = setup_secure(dirs["secure"], args.acls)
        env_secure = dict(env_plain)
        if args.secure_user == BENCH_USER:
            env_secure.update({"TIDELOG_SASL_USERNAME": BENCH_USER, "TIDELOG_SASL_PASSWORD": password,
                               "TIDELOG_SASL_MECHANISM": "SCRAM-SHA-512"})
        envs = {"plain": env_plain, "secure": env_secure}
        print(f"{args.rounds} rounds x {args.records:,} records of 1 KiB (16-byte keys), acks=1; secure side: "
              f"SASL_SSL SCRAM-SHA-512 as {args.secure_user}, {args.acls} ACLs; doors: {', '.join(doors)}", flush=True)
        for r in range(1, args.rounds + 1):
            order = ("plain", "secure") if r % 2 else ("secure", "plain")
            for door in doors:
                got: dict[tuple[str, str], dict[str, Any]] = {}
                for side in order:
                    topic = f"{PREFIX}{door}-{r}"
                    for kind in ("produce", "consume"):
                        res = run(kind, door, dirs[side], topic, args.records, envs[side])
                        got[(side, kind)] = res
                        results.append({**res, "round": r, "door": door, "side": side, "kind": kind})  # res has a "door" too
                        print(f"round {r} {door:5} {kind:7} {side:6} {line(res)}", flush=True)
                for kind in ("produce", "consume"):
                    p, s = got[("plain", kind)], got[("secure", kind)]
                    if "error" not in p and "error" not in s:
                        ratio = s["records_per_s"] / p["records_per_s"]
                        results.append({"round": r, "door": door, "kind": kind, "ratio": ratio})
                        print(f"round {r} {door:5} {kind:7} secure/plain {ratio:.3f}", flush=True)
        print("median secure/plain (records/s):")
        for door in doors:
            for kind in ("produce", "consume"):
                ratios = [x["ratio"] for x in results if x.get("door") == door and x.get("kind") == kind
                          and "ratio" in x]
                if ratios:
                    print(f"  {door:5} {kind:7} {statistics.median(ratios):.3f}  (rounds: "
                          f"{', '.join(f'{x:.3f}' for x in ratios)})", flush=True)
                for side in ("plain", "secure"):  # CPU per record: less disturbed by other load than records/s
                    runs = [x for x in results if x.get("door") == door and x.get("kind") == kind
                            and x.get("side") == side and "records_per_s" in x]
                    med = {k: statistics.median(v) for k in ("broker_cpu_us_per_record", "client_cpu_us_per_record")
                           if (v := [x[k] for x in runs if x.get(k) is not None])}
                    if med:
                        print(f"      {side:6} median CPU/rec: broker {med.get('broker_cpu_us_per_record', 0):.2f} us, "
                              f"client {med.get('client_cpu_us_per_record', 0):.2f} us", flush=True)
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        for d in dirs.values():
            stop(d)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
