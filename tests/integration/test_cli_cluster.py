"""`tidelog up --detach` / `status` / `down` as a user runs them, with TIDELOG_DATA_DIR set once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from shared.cli.processes import is_same_process
from tests.conftest import REPO, TEST_SESSION_TIMEOUT_MS


def _tidelog(args: list[str], env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shared.cli.main", *args], input=stdin, capture_output=True,
                          text=True, timeout=120, cwd=REPO, env=env)


def test_data_dir_set_once_carries_through_and_down_stops_brokers_before_controllers(tmp_path) -> None:
    env = {**os.environ, "TIDELOG_DATA_DIR": str(tmp_path / "tl"),
           "TIDELOG_SESSION_TIMEOUT_MS": str(TEST_SESSION_TIMEOUT_MS)}
    r = _tidelog(["up", "--detach", "--controllers", "1", "--brokers", "2", "--cleaners", "0",
                  "--coordinators", "0", "--quotas", "0"], env)
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "tl" / "cluster.json") as f:
        info = json.load(f)
    try:
        assert info["session_timeout_ms"] == TEST_SESSION_TIMEOUT_MS  # the TIDELOG_* value was passed on
        r = _tidelog(["topics", "create", "clicks", "--partitions", "1", "--replication-factor", "2"], env)
        assert r.returncode == 0 and "(1 partition," in r.stdout, r.stdout + r.stderr
        r = _tidelog(["produce", "clicks"], env, stdin="a\nb\n")
        assert r.returncode == 0 and "2 records sent" in r.stderr, r.stderr
        r = _tidelog(["produce", "nosuch", "--max-block-ms", "1000"], env, stdin="x\n")
        assert r.returncode == 1 and "'nosuch' not present in metadata after 1000 ms" in r.stderr, r.stderr
        st = json.loads(_tidelog(["status", "--json"], env).stdout)
        assert all(p["alive"] for p in st["processes"]) and st["launcher"]["detached"]
    finally:
        down = _tidelog(["down"], env)
    assert down.returncode == 0 and down.stdout.strip() == "stopped", down.stdout + down.stderr
    assert not any(is_same_process(p) for p in info["processes"]), "down returned before every process exited"
    # The controller still ran when the brokers stopped: the one leading clicks-0 handed it over.
    logs = [open(p["log"]).read() for p in info["processes"] if p["role"] == "broker"]
    assert any("controlled shutdown done" in text for text in logs)
    assert not any("controlled shutdown timed out" in text for text in logs)


def test_no_cluster_found_names_the_directory_and_the_variable(tmp_path) -> None:
    env = {**os.environ, "TIDELOG_DATA_DIR": str(tmp_path / "none")}
    r = _tidelog(["topics", "list"], env)
    assert r.returncode == 1 and "TIDELOG_DATA_DIR" in r.stderr and str(tmp_path / "none") in r.stderr
    r = _tidelog(["up", "--detach"], {**env, "TIDELOG_SESSION_TIMEOUT_MS": "abc"})
    assert r.returncode == 2 and "TIDELOG_SESSION_TIMEOUT_MS" in r.stderr and "abc" in r.stderr
