"""``tidelog bench compact --cluster``: real cleaner worker processes over gRPC against a real broker.

Starts a local cluster (etcd, one controller, one broker, no cleaner), and for each worker
count N: creates a compacted topic of ``partitions`` partitions, produces ``log_mb`` of
keyed records (16-byte keys drawn from ``distinct_keys``, ``value_size``-byte values) with
the Python producer, syncs it to disk, then starts N cleaner workers and times them until the broker has
accepted one cleaning per partition (every job: lease, segments streamed to the worker,
cleaning, result streamed back, the broker's check, the swap). MB/s is the broker's count of
bytes cleaned over that time; the CPU seconds the broker (with its check process) and the workers
spent in that time are reported beside it. The workers are stopped before the next round.

Everything runs on this machine: the producer's, the broker's and the workers' processes
share its cores, so the figure is the whole pipeline's, not a worker's alone.
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
import time
from dataclasses import asdict, dataclass

from shared.cli.bench_partitions import cpu_seconds
from shared.cli.launcher import ClusterSpec, LocalCluster, Proc, stop_processes
from shared.client import Admin, Producer
from shared.proto import cleaner_pb2 as cpb
from shared.proto import cleaner_pb2_grpc as cgrpc
from shared.security.transport import sync_channel

ENV = {"TIDELOG_LOG_CLEANER_BACKOFF_MS": "100", "TIDELOG_CONTROLLED_SHUTDOWN_ENABLE": "false"}


@dataclass(frozen=True)
class ClusterCompactBench:
    log_bytes: int
    partitions: int
    distinct_keys: int
    mb_per_s: dict[int, float]  # workers -> MB/s cleaned end to end
    seconds: dict[int, float]
    cleaned_bytes: dict[int, int]
    broker_cpu_s: dict[int, float]  # the broker and its check process, during the round
    workers_cpu_s: dict[int, float]  # all the workers, during the round

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _status(address: str) -> cpb.CleanerStatusResponse:
    with sync_channel(address) as ch:
        return cgrpc.LogCleanerStub(ch).CleanerStatus(cpb.CleanerStatusRequest(), timeout=10)


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the broker's check process)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _cpu(pids: list[int]) -> dict[int, float]:
    got = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            got[pid] = cpu_seconds(pid)
    return got


def _spent(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


def _produce(broker: str, topic: str, records: int, keys: int, value_size: int, seed: int,
             segment_bytes: int) -> None:
    rng = random.Random(seed)
    value = b"v" * value_size
    # A batch must fit a segment (Kafka refuses a larger one: RECORD_LIST_TOO_LARGE).
    batch_size = min(256 * 1024, segment_bytes // 2)
    with Producer(broker, linger_ms=20, batch_size=batch_size, max_request_size=4 << 20) as producer:
        for _ in range(records):
            producer.send(topic, value, key=b"%016d" % rng.randrange(keys))
        producer.flush()


def _round(lc: LocalCluster, broker: str, n: int, first_id: int, topic: str, partitions: int,
           timeout_s: float) -> tuple[float, int, float, float]:
    """``(seconds, bytes cleaned, broker CPU s, workers CPU s)`` of one round."""
    before = _status(broker)
    broker_pid = next(p.pid for p in lc.procs if p.role == "broker")
    workers: list[Proc] = [lc.start_service("cleaner", first_id + i) for i in range(n)]
    try:
        lc.wait_ready(workers, 60)
        cpu0 = _cpu(_tree(broker_pid)), _cpu([w.pid for w in workers])
        start = time.monotonic()
        deadline = start + timeout_s
        while True:
            st = _status(broker)
            if st.jobs_done - before.jobs_done >= partitions and not st.jobs:
                break
            if st.jobs_refused > before.jobs_refused or st.quarantined:
                raise RuntimeError(f"a cleaning of {topic} was refused: see the broker's log")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic} not cleaned within {timeout_s:.0f} s")
            time.sleep(0.05)
        elapsed = time.monotonic() - start
        broker_cpu = _spent(cpu0[0], _cpu(_tree(broker_pid)))
        workers_cpu = _spent(cpu0[1], _cpu([w.pid for w in workers]))
        return elapsed, st.cleaned_bytes - before.cleaned_bytes, broker_cpu, workers_cpu
    finally:
        stop_processes([w.as_dict() for w in workers])


def run_cluster_compact_bench(log_mb: int = 64, partitions: int = 4, distinct_keys: int = 100_000,
                              value_size: int = 1024, workers: tuple[int, ...] = (1, 2),
                              timeout_s: float = 600.0) -> ClusterCompactBench:
    per_record = value_size + 16 + 12
    records = max(log_mb * 1_000_000 // per_record, 1)
    segment_bytes = max(1 << 16, log_mb * 1_000_000 // partitions // 8)  # ~8 segments per log
    configs = {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}
    rates: dict[int, float] = {}
    seconds: dict[int, float] = {}
    cleaned: dict[int, int] = {}
    broker_cpu: dict[int, float] = {}
    workers_cpu: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="tidelog-compact-bench-") as tmp:
        lc = LocalCluster(ClusterSpec(tmp, controllers=1, brokers=1, coordinators=0, cleaners=0, quotas=0,
                                      extra_env=ENV))
        lc.start(timeout=90)
        try:
            broker = next(p.address for p in lc.procs if p.role == "broker")
            admin = Admin(broker)
            next_id = 1
            for n in workers:
                topic = f"compact-bench-{n}-workers"
                admin.create_topic(topic, partitions=partitions, replication_factor=1, configs=configs)
                _produce(broker, topic, records, distinct_keys, value_size, seed=n, segment_bytes=segment_bytes)
                os.sync()  # the produced log reaches the disk before the clock starts, not during the round
                seconds[n], cleaned[n], broker_cpu[n], workers_cpu[n] = _round(lc, broker, n, next_id, topic,
                                                                               partitions, timeout_s)
                next_id += n
                rates[n] = cleaned[n] / 1e6 / max(seconds[n], 1e-9)
        finally:
            lc.stop()
    return ClusterCompactBench(records * per_record, partitions, distinct_keys, rates, seconds, cleaned, broker_cpu,
                               workers_cpu)
