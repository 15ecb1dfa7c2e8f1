"""Helpers for fault tests: a continuous workload, and reading every replica's log from disk."""

from __future__ import annotations

import glob
import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from services.broker.log.hw_checkpoint import read_checkpoint
from shared.client import Consumer, Producer, TopicPartition
from shared.records.decoder import iter_records


@dataclass
class Workload:
    """Idempotent acks=all producers sending numbered values, and a consumer recording what it saw."""

    bootstrap: str
    topic: str
    partitions: int
    producers: int = 2
    rate_per_producer: float = 300.0
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    failed: list[tuple[bytes, str]] = field(default_factory=list)
    seen: list[tuple[int, int, bytes]] = field(default_factory=list)
    sent: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        for pid in range(self.producers):
            self._threads.append(threading.Thread(target=self._produce, args=(pid,), daemon=True))
        self._consumer_thread = threading.Thread(target=self._consume, daemon=True)
        for t in self._threads:
            t.start()
        self._consumer_thread.start()

    def _produce(self, pid: int) -> None:
        producer = Producer(self.bootstrap, acks="all", linger_ms=2, request_timeout_ms=4000,
                            delivery_timeout_ms=120_000, retry_backoff_ms=50)
        n = 0
        t0 = time.monotonic()
        try:
            while not self._stop.is_set():
                value = f"p{pid}-{n:07d}".encode()
                fut = producer.send(self.topic, value, key=f"k{n % 97}".encode())

                def ok(md, value=value) -> None:
                    with self._lock:
                        self.acked[value] = (md.partition, md.offset)

                def bad(exc, value=value) -> None:
                    with self._lock:
                        self.failed.append((value, repr(exc)))

                fut.add_callback(ok).add_errback(bad)
                n += 1
                with self._lock:
                    self.sent += 1
                ahead = n / self.rate_per_producer - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
            producer.flush(150)
        finally:
            producer.close()

    def _consume(self) -> None:
        consumer = Consumer(self.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=200)
        try:
            consumer.assign([TopicPartition(self.topic, p) for p in range(self.partitions)])
            while not self._stop.is_set() or self._consumer_drain:
                for r in consumer.poll(200):
                    self.seen.append((r.partition, r.offset, r.value))
                if self._stop.is_set():
                    self._consumer_drain -= 1
        finally:
            consumer.close()

    _consumer_drain: int = 15

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(180)
        self._consumer_thread.join(60)


def read_replica_logs(data_dir: str, broker_ids: list[int], topic: str, partition: int) -> dict[int, list[tuple[int, bytes]]]:
    """Every replica's records for one partition, straight from its segment files."""
    out: dict[int, list[tuple[int, bytes]]] = {}
    for b in broker_ids:
        files = sorted(glob.glob(os.path.join(data_dir, f"broker-{b}", f"{topic}-{partition}", "*.log")))
        data = b"".join(open(f, "rb").read() for f in files)
        out[b] = [(r.offset, r.value) for r in iter_records(data)]
    return out


def replicas_converged(data_dir: str, broker_ids: list[int], topic: str, partitions: list[int]) -> bool:
    """Every replica of each partition holds the same records (read from disk while the brokers run:
    a batch being written makes this False until the next look)."""
    try:
        for p in partitions:
            logs = list(read_replica_logs(data_dir, broker_ids, topic, p).values())
            if any(lg != logs[0] for lg in logs[1:]):
                return False
    except Exception:  # a torn read of a batch being appended
        return False
    return True


def read_hw(data_dir: str, broker: int, topic: str, partition: int) -> int:
    return read_checkpoint(os.path.join(data_dir, f"broker-{broker}")).get(TopicPartition(topic, partition), 0)


def check_no_loss(workload: Workload, final_logs: dict[int, dict[int, list[tuple[int, bytes]]]]) -> dict[str, int]:
    """Acked records present exactly once at their acked offsets, in order per producer; consumers saw no phantom."""
    leader_view: dict[int, dict[int, bytes]] = {}
    for p, replicas in final_logs.items():
        logs = list(replicas.values())
        shortest = min(len(lg) for lg in logs)
        for lg in logs:  # all replicas agree on their common prefix
            assert lg[:shortest] == logs[0][:shortest], f"replicas of partition {p} diverge"
        longest = max(logs, key=len)
        leader_view[p] = dict(longest)
        values = [v for _, v in longest]
        assert len(values) == len(set(values)), f"duplicates in partition {p}"
        offsets = [o for o, _ in longest]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))) if offsets else True
        last: dict[str, int] = defaultdict(lambda: -1)
        for v in values:
            prod, n = v.decode().split("-")
            assert int(n) > last[prod], f"producer {prod} out of order in partition {p}"
            last[prod] = int(n)
        committed = min(len(lg) for lg in logs)
        for value, (part, off) in workload.acked.items():
            if part == p:
                assert off < committed, f"acked {value!r} at {p}:{off} is not on every replica"
    for value, (part, off) in workload.acked.items():
        assert leader_view[part].get(off) == value, f"acked {value!r} at {part}:{off} lost (found {leader_view[part].get(off)!r})"
    for part, off, value in workload.seen:
        assert leader_view[part].get(off) == value, f"consumer saw {value!r} at {part}:{off}, which later vanished"
    return {"acked": len(workload.acked), "seen": len(workload.seen), "failed": len(workload.failed), "sent": workload.sent}
