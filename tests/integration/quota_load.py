"""Load generators and broker-side measurements for the quota tests (not a test module)."""

from __future__ import annotations

import threading
import time

import grpc

from shared.client import Consumer, Producer
from shared.proto import quota_pb2 as qpb
from shared.proto import quota_pb2_grpc as qpb_grpc
from shared.types import TopicPartition

VALUE = b"v" * 1000


class ProduceLoad(threading.Thread):
    """A producer with a client id sending as fast as it is let (small batches, small buffer)."""

    def __init__(self, bootstrap: str, client_id: str, topic: str, partitions: int = 1, **config: int) -> None:
        super().__init__(daemon=True, name=f"load-{client_id}")
        cfg = {"batch_size": 16_384, "linger_ms": 2, "buffer_memory": 512 * 1024, **config}
        self.producer = Producer(bootstrap, client_id=client_id, **cfg)
        self.topic = topic
        self.partitions = partitions
        self.errors: list[BaseException] = []
        self.sent = 0
        self._halt = threading.Event()

    def run(self) -> None:
        n = 0
        while not self._halt.is_set():
            try:
                fut = self.producer.send(self.topic, VALUE, partition=n % self.partitions)
                fut.add_errback(self.errors.append)
                n += 1
                self.sent = n
            except Exception as exc:  # a send that cannot even be queued is an error too
                self.errors.append(exc)
                time.sleep(0.05)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        self.producer.flush(60)
        self.producer.close()


class ConsumeLoad(threading.Thread):
    """A consumer with a client id reading a partition from the beginning as fast as it is let."""

    def __init__(self, bootstrap: str, client_id: str, topic: str) -> None:
        super().__init__(daemon=True, name=f"load-{client_id}")
        self.consumer = Consumer(bootstrap, client_id=client_id, auto_offset_reset="earliest",
                                 max_partition_fetch_bytes=64 * 1024)
        self.consumer.assign([TopicPartition(topic, 0)])
        self.records = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.records += len(self.consumer.poll(100))

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        self.consumer.close()


class BrokerUsage:
    """Usage as the brokers measured and reported it, read from the active quota instance."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses

    def _describe(self) -> qpb.DescribeUsageResponse:
        for address in self.addresses:
            try:
                with grpc.insecure_channel(address) as ch:
                    resp = qpb_grpc.QuotaServiceStub(ch).DescribeUsage(qpb.DescribeUsageRequest(), timeout=3)
                if resp.active:
                    return resp
            except grpc.RpcError:
                continue
        raise AssertionError("no active quota instance answered")

    def active_instance(self) -> str | None:
        try:
            return self._describe().instance
        except AssertionError:
            return None

    def totals(self, qtype: int) -> dict[str, float]:
        """client id -> amount summed over brokers."""
        out: dict[str, float] = {}
        for t in self._describe().totals:
            if t.quota_type == qtype:
                out[t.client_id] = out.get(t.client_id, 0.0) + t.total
        return out

    def per_broker(self, qtype: int, client_id: str) -> dict[int, float]:
        return {t.broker_id: t.total for t in self._describe().totals
                if t.quota_type == qtype and t.client_id == client_id}

    def rates_over(self, qtype: int, seconds: float) -> dict[str, float]:
        """Each client id's amount per second over the next ``seconds`` (a measurement window)."""
        before, t0 = self.totals(qtype), time.monotonic()
        time.sleep(seconds)
        after, t1 = self.totals(qtype), time.monotonic()
        return {c: (v - before.get(c, 0.0)) / (t1 - t0) for c, v in after.items()}
