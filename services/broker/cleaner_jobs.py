"""The broker's board of compaction jobs: leases, expiry, failures and quarantine.

A job is leased to one worker until a deadline that the worker renews while it works; a
log has at most one job at a time, so two workers never hold the same log. A lease that
runs out frees the log (the job is offered again), and counts as a failure, as does a
result the broker refuses or a failure the worker reports. A log that fails
``max_failures`` times in a row is quarantined (KIP-346's uncleanable partitions) and not
offered again until the broker restarts or ``release`` is called; a success resets its count.

Pure: time comes in as ``now_ms``; no gRPC, no files.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


class LeaseError(Exception):
    """The job is unknown, no longer leased to this worker, or past its deadline."""


@dataclass(slots=True)
class Lease(Generic[T]):
    job_id: str
    log: str
    worker: str
    deadline_ms: int
    started_ms: int
    payload: T
    progress: float = 0.0


@dataclass
class JobBoard(Generic[T]):
    lease_ms: int = 30_000
    max_failures: int = 3
    leases: dict[str, Lease[T]] = field(default_factory=dict)  # by job id
    failures: dict[str, int] = field(default_factory=dict)  # by log
    quarantined: dict[str, str] = field(default_factory=dict)  # log -> last failure
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def expire(self, now_ms: int) -> list[Lease[T]]:
        """Drop leases past their deadline (each a failure of its log); return them."""
        gone = [lease for lease in self.leases.values() if lease.deadline_ms <= now_ms]
        for lease in gone:
            del self.leases[lease.job_id]
            self._failed(lease.log, f"lease of worker {lease.worker} ran out")
        return gone

    def busy(self, now_ms: int) -> set[str]:
        """Logs that must not be offered: leased or quarantined."""
        self.expire(now_ms)
        return {lease.log for lease in self.leases.values()} | set(self.quarantined)

    def lease(self, log: str, worker: str, payload: T, now_ms: int) -> Lease[T]:
        if log in self.busy(now_ms):
            raise LeaseError(f"{log} is already being cleaned or is quarantined")
        job_id = f"{log}#{next(self._ids)}"
        lease = Lease(job_id, log, worker, now_ms + self.lease_ms, now_ms, payload)
        self.leases[job_id] = lease
        return lease

    def get(self, job_id: str, worker: str, now_ms: int) -> Lease[T]:
        self.expire(now_ms)
        lease = self.leases.get(job_id)
        if lease is None or lease.worker != worker:
            raise LeaseError(f"job {job_id} is not leased to worker {worker}")
        return lease

    def renew(self, job_id: str, worker: str, now_ms: int, progress: float = 0.0) -> Lease[T]:
        lease = self.get(job_id, worker, now_ms)
        lease.deadline_ms = now_ms + self.lease_ms
        lease.progress = progress
        return lease

    def finish(self, job_id: str, worker: str, now_ms: int, error: str | None = None, *,
               log_at_fault: bool = True) -> Lease[T]:
        """End a job: ``error`` None for a swapped result, else why it failed. A failure that says
        nothing about the log (``log_at_fault=False``: it changed under the job) does not count."""
        lease = self.get(job_id, worker, now_ms)
        del self.leases[job_id]
        if error is None:
            self.failures.pop(lease.log, None)
        elif log_at_fault:
            self._failed(lease.log, error)
        return lease

    def forget(self, log: str) -> None:
        """The log went away (deleted, moved): drop its lease and history."""
        for job_id in [j for j, lease in self.leases.items() if lease.log == log]:
            del self.leases[job_id]
        self.failures.pop(log, None)
        self.quarantined.pop(log, None)

    def release(self, log: str) -> None:
        """Let a quarantined log be cleaned again."""
        self.quarantined.pop(log, None)
        self.failures.pop(log, None)

    def _failed(self, log: str, reason: str) -> None:
        n = self.failures.get(log, 0) + 1
        self.failures[log] = n
        if n >= self.max_failures:
            self.quarantined[log] = reason
