"""`tidelog brokers add` grows a running `tidelog up --detach` cluster: the new brokers register with
their rack, show in `tidelog brokers list` and REST /v1/cluster, and `tidelog down` stops them too."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx

from shared.cli.processes import is_same_process
from tests.conftest import REPO, TEST_SESSION_TIMEOUT_MS, wait_for


def _tidelog(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shared.cli.main", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)


def test_brokers_add_registers_with_racks_and_down_stops_all(tmp_path) -> None:
    data = tmp_path / "tl"
    env = {**os.environ, "TIDELOG_DATA_DIR": str(data), "TIDELOG_SESSION_TIMEOUT_MS": str(TEST_SESSION_TIMEOUT_MS),
           "TIDELOG_OFFSETS_TOPIC_NUM_PARTITIONS": "3", "TIDELOG_OFFSETS_TOPIC_REPLICATION_FACTOR": "1"}
    r = _tidelog(["up", "--detach", "--controllers", "1", "--brokers", "1", "--rack", "r1", "--cleaners", "0",
                  "--coordinators", "0", "--quotas", "0", "--consoles", "0"], env)
    assert r.returncode == 0, r.stderr
    try:
        r = _tidelog(["brokers", "add", "--count", "2", "--rack", "r2"], env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "broker 2 started" in r.stdout and "broker 3 started" in r.stdout, r.stdout
        with open(data / "cluster.json") as f:
            info = json.load(f)
        assert sorted(int(p["id"]) for p in info["processes"] if p["role"] == "broker") == [1, 2, 3]

        def racks() -> dict[int, str]:
            return {b["id"]: b["rack"] for b in httpx.get(f"{info['rest']}/v1/cluster", timeout=5).json()["brokers"]}

        wait_for(lambda: racks() == {1: "r1", 2: "r2", 3: "r2"}, 30, what="three brokers registered with racks")
        listed = json.loads(_tidelog(["brokers", "list", "--json"], env).stdout)
        assert [(b["id"], b["rack"]) for b in listed] == [(1, "r1"), (2, "r2"), (3, "r2")]
        # A new topic uses the new brokers, spread over both racks.
        r = _tidelog(["topics", "create", "wide", "--partitions", "3", "--replication-factor", "2"], env)
        assert r.returncode == 0, r.stdout + r.stderr
        parts = httpx.get(f"{info['rest']}/v1/topics/wide", timeout=5).json()["partitions"]
        assert all({racks()[b] for b in p["replicas"]} == {"r1", "r2"} for p in parts), parts

        # Disk use per broker and per partition (DescribeLogDirs), through REST and `brokers describe`.
        r = subprocess.run([sys.executable, "-m", "shared.cli.main", "produce", "wide"], input="x" * 500 + "\n",
                           capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
        assert r.returncode == 0, r.stderr
        held = {(p["partition"], b) for p in parts for b in p["replicas"]}

        def described() -> dict[tuple[int, int], dict]:
            view = json.loads(_tidelog(["brokers", "describe", "--json", "--topic", "wide"], env).stdout)
            return {(p["partition"], b["broker"]): p for b in view["brokers"] for p in b["partitions"]}

        got = wait_for(lambda: (d := described()) and set(d) == held and sum(p["size"] for p in d.values()) > 0 and d,
                       30, what="every replica described")
        assert all(p["offset_lag"] == 0 and p["is_future"] is False for p in got.values())
        one = httpx.get(f"{info['rest']}/v1/brokers/3/log-dirs", timeout=10).json()["brokers"]
        assert [b["broker"] for b in one] == [3] and one[0]["log_dir"].endswith("broker-3")
        assert one[0]["total_bytes"] > 0 and one[0]["size"] == sum(p["size"] for p in one[0]["partitions"])
        text = _tidelog(["brokers", "describe", "2"], env)
        assert text.returncode == 0 and "Log directories" in text.stdout and "wide" in text.stdout, text.stdout
        assert httpx.get(f"{info['rest']}/v1/brokers/9/log-dirs", timeout=10).json()["error"] == "BROKER_NOT_AVAILABLE"
    finally:
        down = _tidelog(["down"], env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any(is_same_process(p) for p in info["processes"]), "a process outlived `tidelog down`"
