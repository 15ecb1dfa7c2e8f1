"""Compaction job leases: one worker per log, expiry, renewal, failures and quarantine."""

from __future__ import annotations

import pytest

from services.broker.cleaner_jobs import JobBoard, LeaseError


def test_one_job_per_log_renewed_while_working_and_offered_again_when_the_lease_runs_out() -> None:
    board: JobBoard[str] = JobBoard(lease_ms=1000, max_failures=3)
    a = board.lease("t-0", "w1", "job", now_ms=0)
    with pytest.raises(LeaseError):
        board.lease("t-0", "w2", "job", now_ms=10)
    board.renew(a.job_id, "w1", now_ms=900, progress=0.5)
    assert board.busy(1899) == {"t-0"}
    with pytest.raises(LeaseError):
        board.renew(a.job_id, "w2", now_ms=950)
    assert board.busy(1900) == set()  # the worker stopped renewing
    with pytest.raises(LeaseError):
        board.finish(a.job_id, "w1", now_ms=1901)
    b = board.lease("t-0", "w2", "job", now_ms=2000)
    assert b.job_id != a.job_id
    board.finish(b.job_id, "w2", now_ms=2100)
    assert board.failures == {} and board.leases == {}


def test_repeated_failures_quarantine_a_log_until_released() -> None:
    board: JobBoard[None] = JobBoard(lease_ms=1000, max_failures=2)
    j = board.lease("t-0", "w", None, 0)
    board.finish(j.job_id, "w", 1, error="refused: CRC mismatch")
    changed = board.lease("t-0", "w", None, 1)
    board.finish(changed.job_id, "w", 1, error="the log changed", log_at_fault=False)
    assert board.failures == {"t-0": 1}
    assert "t-0" not in board.busy(2)
    board.lease("t-0", "w", None, 2)
    board.expire(5000)
    assert board.quarantined == {"t-0": "lease of worker w ran out"}
    with pytest.raises(LeaseError):
        board.lease("t-0", "w", None, 5001)
    board.release("t-0")
    ok = board.lease("t-0", "w", None, 5002)
    board.finish(ok.job_id, "w", 5003)
    assert board.failures == {}
    board.lease("t-0", "w", None, 6000)
    board.forget("t-0")
    assert board.leases == {} and board.busy(6001) == set()
