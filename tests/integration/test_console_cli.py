"""`tidelog up` starts one web console, prints its URL and writes it under `console` in cluster.json;
`tidelog status` shows it healthy; `--consoles 0` starts none; `tidelog down` stops it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx

from shared.cli.processes import is_same_process
from tests.conftest import REPO, TEST_SESSION_TIMEOUT_MS

SMALL = ["--controllers", "1", "--brokers", "1", "--cleaners", "0", "--coordinators", "0", "--quotas", "0"]


def _tidelog(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shared.cli.main", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)


def test_up_starts_prints_and_records_the_console_and_down_stops_it(tmp_path) -> None:
    env = {**os.environ, "TIDELOG_DATA_DIR": str(tmp_path / "tl"), "TIDELOG_SESSION_TIMEOUT_MS": str(TEST_SESSION_TIMEOUT_MS)}
    r = _tidelog(["up", "--detach", *SMALL], env)
    assert r.returncode == 0, r.stderr
    info = json.loads((tmp_path / "tl" / "cluster.json").read_text())
    try:
        url = info["console"]
        assert f"Web console {url}" in r.stdout
        page = httpx.get(url + "/", timeout=10)
        assert page.status_code == 200 and "Active controller" in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
        st = json.loads(_tidelog(["status", "--json"], env).stdout)
        (console,) = [p for p in st["processes"] if p["role"] == "console"]
        assert console["healthy"]
    finally:
        down = _tidelog(["down"], env)
    assert down.returncode == 0, down.stderr
    assert not any(is_same_process(p) for p in info["processes"])


def test_consoles_0_starts_none(tmp_path) -> None:
    env = {**os.environ, "TIDELOG_DATA_DIR": str(tmp_path / "tl"), "TIDELOG_SESSION_TIMEOUT_MS": str(TEST_SESSION_TIMEOUT_MS)}
    r = _tidelog(["up", "--detach", "--consoles", "0", *SMALL], env)
    assert r.returncode == 0, r.stderr
    try:
        info = json.loads((tmp_path / "tl" / "cluster.json").read_text())
        assert info["console"] is None and "Web console" not in r.stdout
        assert not [p for p in info["processes"] if p["role"] == "console"]
    finally:
        assert _tidelog(["down"], env).returncode == 0
