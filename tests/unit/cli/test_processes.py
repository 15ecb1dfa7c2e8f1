"""Stopping a local cluster: the stop order (pure) and the pid start-time check (on this very process)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shared.cli import processes
from shared.cli.processes import is_same_process, start_time, stop_phases, stop_processes


def _p(role: str, ident: str = "1", pid: int = 1) -> dict:
    return {"role": role, "id": ident, "pid": pid}


def test_brokers_and_other_services_stop_before_controllers_and_etcd_last() -> None:
    procs = [_p("etcd", "etcd"), _p("controller", "1"), _p("controller", "2"), _p("broker", "1"), _p("broker", "2"),
             _p("coordinator"), _p("quota"), _p("cleaner")]
    phases = [[(p["role"], p["id"]) for p in phase] for phase in stop_phases(procs)]
    assert phases == [
        [("cleaner", "1"), ("quota", "1"), ("coordinator", "1"), ("broker", "1"), ("broker", "2")],
        [("controller", "1"), ("controller", "2")],
        [("etcd", "etcd")],
    ]
    assert stop_phases([_p("etcd", "etcd")]) == [[_p("etcd", "etcd")]]


def test_a_recorded_pid_counts_only_while_its_start_time_matches() -> None:
    me = os.getpid()
    assert start_time(me) is not None
    assert is_same_process({"pid": me, "start_time": start_time(me)})
    assert is_same_process({"pid": me})  # recorded by an older launcher: no start time to compare
    assert not is_same_process({"pid": me, "start_time": start_time(me) + 1})  # the pid was reused


def test_stop_processes_never_signals_a_reused_pid_and_returns_when_all_have_exited() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        st = start_time(sleeper.pid)
        reused = {"role": "broker", "id": "1", "pid": sleeper.pid, "start_time": st + 1}
        assert stop_processes([reused], timeout=1) == []
        assert sleeper.poll() is None, "a process that is not the recorded one was signalled"
        mine = {**reused, "start_time": st}
        assert stop_processes([mine], timeout=5) == []
        assert not is_same_process(mine)  # returned only once it exited
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_process_reaped_between_the_signal_and_the_stat_read_is_not_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    # CI failure of 5 December: reading /proc/PID/stat of a process reaped just after kill(pid, 0)
    # raises ESRCH (ProcessLookupError), which stopping a cluster let escape.
    def gone(*_a: object, **_k: object) -> None:
        raise ProcessLookupError(3, "No such process")

    monkeypatch.setattr(processes, "open", gone, raising=False)
    assert processes.pid_alive(os.getpid()) is False
