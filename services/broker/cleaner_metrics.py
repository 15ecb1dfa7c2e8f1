"""The log cleaner's Prometheus metrics on the broker that owns the logs (Kafka's LogCleaner and
LogCleanerManager: max-dirty-percent, max-compaction-delay-secs, uncleanable-partitions-count).

``CleanerCollector.refresh`` runs in the broker's housekeeping (event loop); the scrape only
reads the last snapshot, so it never walks segments from the HTTP thread.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


class CleanerCollector(Collector):
    def __init__(self, broker_id: int, every_s: float = 5.0) -> None:
        self.broker_id = broker_id
        self.every_s = every_s
        self.snapshot: dict[str, float] = {}
        self._last = float("-inf")

    def refresh(self, jobs: Any, now: float | None = None) -> None:
        """Assess the compacted logs again, at most every ``every_s`` (housekeeping runs every second)."""
        now = time.monotonic() if now is None else now
        if now - self._last < self.every_s:
            return
        self._last = now
        status = jobs.status(self.broker_id)
        self.snapshot = {
            "max_dirty_ratio": max((log.dirty_ratio for log in status.logs), default=0.0),
            "max_delay_s": max((log.compaction_delay_ms for log in status.logs), default=0) / 1000,
            "uncleanable": len(status.quarantined),
            "cleaned_bytes": status.cleaned_bytes,
            "jobs_done": status.jobs_done,
            "in_progress": len(status.jobs),
        }

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        s = self.snapshot
        yield GaugeMetricFamily("tidelog_log_cleaner_max_dirty_ratio", "Highest dirty ratio of this broker's "
                                "compacted logs (max-dirty-percent / 100)", value=s.get("max_dirty_ratio", 0.0))
        yield GaugeMetricFamily("tidelog_log_cleaner_max_compaction_delay_seconds", "Longest time a dirty record "
                                "is past max.compaction.lag.ms", value=s.get("max_delay_s", 0.0))
        yield GaugeMetricFamily("tidelog_log_cleaner_uncleanable_partitions_count", "Logs quarantined after "
                                "repeated cleaning failures (KIP-346)", value=s.get("uncleanable", 0))
        yield GaugeMetricFamily("tidelog_log_cleaner_jobs_in_progress", "Compaction jobs leased to workers",
                                value=s.get("in_progress", 0))
        yield CounterMetricFamily("tidelog_log_cleaner_cleaned_bytes", "Bytes of log replaced by cleaned segments",
                                  value=s.get("cleaned_bytes", 0))
        yield CounterMetricFamily("tidelog_log_cleaner_jobs_done", "Compaction jobs completed",
                                  value=s.get("jobs_done", 0))
