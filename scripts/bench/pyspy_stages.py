"""Split a py-spy profile of a broker's event-loop thread into the produce path's stages.

    py-spy record --pid BROKER_PID --format raw -o /tmp/b.txt --rate 250 --duration 20 [--native]
    python scripts/bench/pyspy_stages.py /tmp/b.txt [--us-per-record 1.4]

Each sample of the event-loop thread (stacks through ``BaseEventLoop._run_once``) goes to the stage of
its innermost frame that names one (first match from the leaf up); with ``--us-per-record`` (the loop
thread's on-CPU µs per record, from ``broker_cpu.py``) the shares are also given in µs per record.
py-spy samples wall time while a thread is not idle, so a stage blocked in the kernel counts (with
``--native`` the leaf is the C function: ``writev``, ``sendmsg``).
"""

from __future__ import annotations

import argparse
import collections

# (stage, substrings of a frame), matched from the leaf up: the first frame naming a stage wins.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("validation", ("validate_produce", "services/broker/log/validation.py", "shared/records/validate")),
    ("append/write", ("LogSegment.append", "writev", "PartitionLog._write", "PartitionLog.append_validated",
                      "services/broker/log/")),
    ("replication bookkeeping", ("Partition.", "producer_state.py", "replica_manager.py")),
    ("metrics", ("services/broker/metrics.py", "prometheus_client", "shared/metrics.py")),
    ("quota", ("RequestPipeline.account", "quota_state.py", "QuotaAccounting")),
    ("pipeline/context", ("RequestPipeline.", "request_context.py", "_context", "services/broker/pipeline.py",
                          "api/produce.py", "BrokerServicer._append")),
    ("response", ("BrokerServicer._response", "BrokerServicer._ready", "BrokerServicer._respond", "sendmsg",
                  "_message.abi3.so")),
    ("gRPC decode", ("produce_wire", "shared/proto/wire.py", "_read_produce_request", "grpc_guard", "cygrpc",
                     "recv")),
    ("event loop", ("asyncio/", "_asynciomodule", "epoll", "selectors.py")),
]


def stage_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, keys in STAGES:
            if any(k in frame for k in keys):
                return name
    return "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--us-per-record", type=float, default=0.0)
    ap.add_argument("--thread-frame", default="_run_once", help="a frame every counted stack holds")
    args = ap.parse_args()
    counts: collections.Counter[str] = collections.Counter()
    with open(args.profile) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            if args.thread_frame not in stack:
                continue
            frames = stack.split(";")
            if frames[-1].startswith(("epoll_wait", "EpollSelector.select")):
                counts["(idle: epoll wait)"] += int(n)
                continue
            counts[stage_of(frames)] += int(n)
    busy = sum(v for k, v in counts.items() if not k.startswith("(idle"))
    print(f"{busy} busy samples of the event-loop thread")
    for name, n in counts.most_common():
        share = n / busy if busy and not name.startswith("(idle") else 0.0
        us = f"  {share * args.us_per_record:6.3f} us/record" if args.us_per_record and share else ""
        print(f"{name:26s} {n:6d} {share * 100:5.1f}%{us}")


if __name__ == "__main__":
    main()
