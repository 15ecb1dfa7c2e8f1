"""Preloaded by a fork server in tests/unit/cli/test_forkserver.py: its ``fork_server_warm`` records the pid
it ran in, which a forked child (forkprobe) reports."""

import os

WARMED: list[int] = []


def fork_server_warm() -> None:
    WARMED.append(os.getpid())
