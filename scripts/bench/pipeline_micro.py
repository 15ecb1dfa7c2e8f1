"""CPU time per produce request of the broker's request pipeline pieces, in-process (no network):
the context and quota accounting (no quota / a quota decided and not exceeded), the ProduceSequencer,
the request metrics, and for scale the produce validation of one 1000 x 1 KiB batch.

    PYTHONPATH=. python scripts/bench/pipeline_micro.py      (from the tree to measure)
"""

from __future__ import annotations

import asyncio
import os
import time
import timeit
from collections.abc import AsyncIterator, Callable
from typing import Any

from prometheus_client import CollectorRegistry

from services.broker.log.validation import validate_batches, validate_produce
from services.broker.metrics import BrokerMetrics
from services.broker.pipeline import PRODUCE, PRODUCE_TYPES, ProduceSequencer, RequestPipeline
from services.broker.quota_state import QuotaAccounting
from shared.config import LogConfig
from shared.quota.entities import ANONYMOUS, DEFAULT, PRODUCER_BYTE_RATE, QuotaEntity
from shared.records.builder import BatchBuilder
from shared.types import TopicPartition


def cpu_us(f: Callable[[], Any], number: int) -> float:
    return min(timeit.repeat(f, number=number, repeat=5, timer=time.process_time)) / number * 1e6


def pipeline_us(quota: bool) -> float:
    acc = QuotaAccounting()
    p = RequestPipeline(acc)
    if quota:
        acc.set_configs({QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 1e11}})
        acc.apply([(PRODUCE, ANONYMOUS, "app", 0, 1e12)], time.monotonic() + 1e6)  # fresh for the whole run

    def one() -> None:
        ctx = p.context("Produce", "app", "ipv4:127.0.0.1:5555")
        p.account(ctx, PRODUCE, 1_048_576, 0.0005, PRODUCE_TYPES)

    return cpu_us(one, 20_000)


def sequencer_us(n: int = 20_000) -> float:
    async def requests() -> AsyncIterator[int]:
        for i in range(n):
            yield i
            if i % 5 == 0:
                await asyncio.sleep(0)  # requests arrive in bursts, as from gRPC

    async def begin(i: int) -> int:
        return i

    async def finish(i: int) -> int:
        return i

    async def run() -> float:
        t0 = time.process_time()
        async for _ in ProduceSequencer(begin, finish, lambda i: i).run(requests()):
            pass
        return (time.process_time() - t0) / n * 1e6

    return asyncio.run(run())


def main() -> None:
    b = BatchBuilder()
    now = int(time.time() * 1000)
    for _ in range(1000):
        b.append(os.urandom(1024), os.urandom(16), now)
    batch = b.build()

    class Result:
        error, base_offset, last_offset = 0, 0, 999

    m = BrokerMetrics(CollectorRegistry())
    data = [(TopicPartition("t", 0), batch)]
    results = {TopicPartition("t", 0): Result()}
    config = LogConfig.from_topic_configs({"max.message.bytes": str(8 << 20)})
    print(f"pipeline context + accounting, no quota:        {pipeline_us(False):7.2f} us CPU per request")
    print(f"pipeline context + accounting, quota decided:   {pipeline_us(True):7.2f} us")
    print(f"ProduceSequencer (acks=1: answered at once):    {sequencer_us():7.2f} us")
    print(f"request metrics (produced + request_done):      "
          f"{cpu_us(lambda: (m.produced(data, results), m.request_done('Produce', 0.0, 0.001, 0.0)), 20_000):7.2f} us")
    print(f"validate_produce, 1000 x 1 KiB records:         {cpu_us(lambda: validate_produce(batch, config), 300):7.1f} us")
    print(f"  of which batch headers + CRC:                 "
          f"{cpu_us(lambda: validate_batches(memoryview(batch), 8 << 20), 300):7.1f} us")


if __name__ == "__main__":
    main()
