"""The cleaner worker's Prometheus metrics: jobs it completed or failed, read at scrape time.
The per-log figures (dirty ratio, compaction delay, uncleanable logs, bytes cleaned) are the
brokers' (``services.broker.cleaner_metrics``): the brokers own the logs and the job board."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector


class WorkerCollector(Collector):
    def __init__(self, loop: Callable[[], Any]) -> None:
        self.loop = loop

    def collect(self) -> Iterator[CounterMetricFamily]:
        loop = self.loop()
        yield CounterMetricFamily("tidelog_cleaner_worker_jobs_done", "Compaction jobs this worker completed",
                                  value=loop.jobs_done if loop else 0)
        yield CounterMetricFamily("tidelog_cleaner_worker_jobs_failed", "Compaction jobs this worker failed",
                                  value=loop.jobs_failed if loop else 0)
