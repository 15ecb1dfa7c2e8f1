"""Latency of a transaction's steps on an idle cluster: its first send, a second send and the commit.

Per round: ``begin_transaction()``, one 100-byte record sent and waited for (the first send: the partition
leader adds the partition to the transaction at the coordinator, which is still writing the previous
transaction's markers and completion), a second one (the plain ``acks=all`` round trip), then
``commit_transaction()`` (EndTxn: PrepareCommit written ``acks=all`` to ``__transaction_state``). Prints
p50/p95/p99 in milliseconds, and the CPU the local coordinators and brokers spent per transaction (each
transaction's two sends included). Against the cluster of ``tidelog up`` in DATA_DIR (default ``$TIDELOG_DATA_DIR``
or ``./tidelog-data``); a new topic each run (``--replication-factor``, default 1).

    python scripts/bench/txn_latency.py --data-dir /tmp/tl --rounds 300
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

from shared.cli.bench import _ensure_topic, percentiles
from shared.cli.bench_kafka import BrokerCpu
from shared.cli.connect import bootstrap_servers
from shared.client import Producer
from shared.client.discovery import DATA_DIR_ENV, FALLBACK_DATA_DIR


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--replication-factor", type=int, default=1)
    args = ap.parse_args()
    data_dir = args.data_dir or os.environ.get(DATA_DIR_ENV, FALLBACK_DATA_DIR)
    servers = bootstrap_servers(None, None, data_dir)
    cpus = {role: BrokerCpu(data_dir, role) for role in ("coordinator", "broker")}
    topic = f"txn-latency-{uuid.uuid4().hex[:8]}"
    _ensure_topic(servers, topic, 1, args.replication_factor, 100)
    producer = Producer(servers, transactional_id=topic, linger_ms=0)
    steps: dict[str, list[float]] = {"first send": [], "second send": [], "commit": []}
    try:
        producer.init_transactions()
        for cpu in cpus.values():
            cpu.start()
        for _ in range(args.rounds):
            producer.begin_transaction()
            for step in ("first send", "second send"):
                t0 = time.perf_counter()
                producer.send(topic, b"x" * 100).get(10)
                steps[step].append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            producer.commit_transaction()
            steps["commit"].append((time.perf_counter() - t0) * 1000)
        for cpu in cpus.values():
            cpu.stop()
    finally:
        producer.close()
    for step, ms in steps.items():
        p = percentiles(ms)
        print(f"{step}: p50 {p['p50']:.2f} ms, p95 {p['p95']:.2f} ms, p99 {p['p99']:.2f} ms")
    for role, cpu in cpus.items():
        if cpu.seconds is not None and cpu.pids:
            print(f"{role} CPU per transaction: {cpu.seconds / args.rounds * 1000:.2f} ms ({len(cpu.pids)} process(es))")


if __name__ == "__main__":
    main()
