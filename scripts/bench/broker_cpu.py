"""A process's CPU time per record over a command, per thread group, from /proc (Linux only):
user and system time (``stat``, clock ticks) and time on CPU (``schedstat``, nanoseconds) of the
event-loop thread (the main thread), gRPC's I/O threads (``event_engine``, ``grpc_*``) and the rest
(thread-pool workers: fsyncs, segment flushes).

    python scripts/bench/broker_cpu.py PID RECORDS -- COMMAND ...   e.g.
    python scripts/bench/broker_cpu.py 1234 300000 -- tidelog bench produce --topic t --records 300000

Prints the command's output, then one line per group in µs per record and a JSON line (``--json``).
CPU time is less sensitive to other load on the machine than records/s, but the kernel's share
(``sys``: the page-cache writes, socket reads) varies with the host's memory (first touch of a page
costs much more on a VM): compare interleaved runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

TICK = os.sysconf("SC_CLK_TCK")
GROUPS = ("loop", "grpc", "other")


def _group(pid: int, tid: int, comm: str) -> str:
    if tid == pid:
        return "loop"
    if comm.startswith(("event_engine", "grpc")):
        return "grpc"
    return "other"


def snapshot(pid: int) -> dict[int, tuple[str, int, int, int]]:
    """Per thread: (group, utime ticks, stime ticks, ns on CPU)."""
    out: dict[int, tuple[str, int, int, int]] = {}
    for name in os.listdir(f"/proc/{pid}/task"):
        tid = int(name)
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[tid] = (_group(pid, tid, comm), int(fields[11]), int(fields[12]), ns)
    return out


def delta(before: dict[int, tuple[str, int, int, int]],
          after: dict[int, tuple[str, int, int, int]]) -> dict[str, dict[str, float]]:
    """Seconds of user, system and on-CPU time per group between two snapshots (threads that ended
    in between are lost: the process's own totals are not per thread)."""
    res = {g: {"user": 0.0, "sys": 0.0, "cpu": 0.0} for g in GROUPS}
    for tid, (group, u, s, ns) in after.items():
        _, u0, s0, ns0 = before.get(tid, (group, 0, 0, 0))
        res[group]["user"] += (u - u0) / TICK
        res[group]["sys"] += (s - s0) / TICK
        res[group]["cpu"] += (ns - ns0) / 1e9
    return res


def per_record(d: dict[str, dict[str, float]], records: int) -> dict[str, dict[str, float]]:
    out = {g: {k: round(v / records * 1e6, 3) for k, v in d[g].items()} for g in GROUPS}
    out["total"] = {k: round(sum(d[g][k] for g in GROUPS) / records * 1e6, 3) for k in ("user", "sys", "cpu")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pid", type=int)
    ap.add_argument("records", type=int)
    ap.add_argument("--json", action="store_true", help="the command's output, then only the JSON line")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    before = snapshot(args.pid)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    after = snapshot(args.pid)
    res = per_record(delta(before, after), args.records)
    sys.stdout.write(proc.stdout)
    if not args.json:
        for g, v in res.items():
            print(f"broker {g:5s} user {v['user']:.3f} sys {v['sys']:.3f} on-CPU {v['cpu']:.3f} us/record")
    print(json.dumps({"broker_us_per_record": res, "rc": proc.returncode}))
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
