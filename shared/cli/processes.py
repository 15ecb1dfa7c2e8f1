"""The processes of a local cluster as recorded in cluster.json: is a recorded pid still the process we
started (pid and start time), and stopping them in an order that lets each leave cleanly.

Stop order (``stop_phases``, pure): brokers and the other services first, while the controllers still
run (a broker's controlled shutdown asks the active controller to move its leaderships away), then the
controllers, then etcd. Each phase is waited for before the next; ``stop_processes`` returns only when
every process has exited.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

#: Services stop in the reverse of this start order, controllers last among them.
ROLE_ORDER = ("controller", "broker", "coordinator", "quota", "cleaner")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):  # gone meanwhile: the read of a just-reaped process's stat is ESRCH
        return False


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
        return int(fields[19])  # fields[0] is field 3 (state)
    except (OSError, IndexError, ValueError):
        return None


def is_same_process(entry: dict[str, Any]) -> bool:
    """Is the recorded process still running, and still the one recorded (not a reused pid)?"""
    pid = entry["pid"]
    if not pid_alive(pid):
        return False
    recorded = entry.get("start_time")
    return recorded is None or start_time(pid) == recorded


def stop_phases(processes: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Groups to stop one after the other: other services (reverse start order), controllers, etcd."""
    rank = {role: i for i, role in enumerate(ROLE_ORDER)}
    others = sorted((p for p in processes if p["role"] not in ("etcd", "controller")),
                    key=lambda p: -rank.get(p["role"], len(ROLE_ORDER)))
    controllers = [p for p in processes if p["role"] == "controller"]
    etcd = [p for p in processes if p["role"] == "etcd"]
    return [phase for phase in (others, controllers, etcd) if phase]


def _signal(entry: dict[str, Any], sig: signal.Signals) -> None:
    if is_same_process(entry):
        with contextlib.suppress(ProcessLookupError):
            os.kill(entry["pid"], sig)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _wait_gone(group: list[dict[str, Any]], deadline: float) -> list[dict[str, Any]]:
    """Wait until every process of ``group`` exited or ``deadline``; the ones still running."""
    while True:
        for p in group:
            _reap(p["pid"])
        running = [p for p in group if is_same_process(p)]
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.05)


def stop_processes(processes: list[dict[str, Any]], timeout: float = 15.0) -> list[dict[str, Any]]:
    """SIGTERM each phase (see ``stop_phases``) and wait for it; SIGKILL what outlives ``timeout``.
    Returns only when every process has exited; the list names the processes that had to be killed."""
    killed: list[dict[str, Any]] = []
    for group in stop_phases(processes):
        for p in group:
            _signal(p, signal.SIGTERM)
        stragglers = _wait_gone(group, time.monotonic() + timeout)
        for p in stragglers:
            _signal(p, signal.SIGKILL)
        killed += stragglers
        _wait_gone(stragglers, time.monotonic() + 10)
    return killed
