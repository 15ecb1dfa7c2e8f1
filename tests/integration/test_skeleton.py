"""The walking skeleton on real processes: start-up, controller failover and fencing, broker liveness, bad input."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import yaml

from shared.cli.launcher import ROLE_MODULES, grpc_healthy, pid_alive
from tests.conftest import REPO, TEST_SESSION_TIMEOUT_MS, wait_for


def test_cluster_comes_up_healthy(cluster) -> None:
    info = cluster.info
    assert info["startup_s"] < 60
    roles = [p["role"] for p in info["processes"]]
    assert roles.count("controller") == 2 and roles.count("broker") == 3 and roles.count("cleaner") == 2
    for p in info["processes"]:
        assert pid_alive(p["pid"])
        if p["role"] != "etcd":
            assert grpc_healthy(p["address"]), p
    with open(os.path.join(info["data_dir"], "cluster.json")) as f:
        on_disk = json.load(f)
    assert on_disk["rest"] == info["rest"] and on_disk["etcd"] == info["etcd"]
    view = cluster.cluster_view()
    assert view["cluster_id"] and view["controller"]["epoch"] > 0
    assert [b["id"] for b in view["brokers"]] == [1, 2, 3]
    assert {b["address"] for b in view["brokers"]} == {p.address for p in cluster.procs("broker")}
    assert len(view["services"]["coordinator"]) == 1
    assert len(view["services"]["cleaner"]) == 2
    assert len(view["services"]["quota"]) == 1
    assert len(view["controllers"]) == 2
    docs = httpx.get(f"{cluster.rest}/docs", timeout=5)
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    assert "/v1/cluster" in httpx.get(f"{cluster.rest}/openapi.json", timeout=5).json()["paths"]


def test_status_command_json(cluster) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "shared.cli.main", "status", "--json", "--data-dir", cluster.info["data_dir"]],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    st = json.loads(out.stdout)
    assert all(p["alive"] and p["healthy"] for p in st["processes"])
    assert st["view"]["controller"]["epoch"] > 0


def _active(cluster) -> tuple[int, int]:
    view = cluster.cluster_view()
    return view["controller"]["id"], view["controller"]["epoch"]


def test_kill9_active_controller_standby_takes_over_with_higher_epoch(make_cluster) -> None:
    c = make_cluster(brokers=1, cleaners=0, coordinators=0, quotas=0)
    old_id, old_epoch = wait_for(lambda: _active(c), 20, what="an active controller")
    victim = c.proc("controller", old_id)
    os.kill(victim.pid, signal.SIGKILL)
    t0 = time.monotonic()
    other = next(p for p in c.procs("controller") if p.id != str(old_id))
    new = wait_for(
        lambda: (v := c.cluster_view(via=other.info["rest"]))["controller"]
        and v["controller"]["id"] != old_id and v["controller"],
        TEST_SESSION_TIMEOUT_MS / 1000 + 5,
        what="standby to become active",
    )
    took = time.monotonic() - t0
    assert new["epoch"] > old_epoch
    assert took <= TEST_SESSION_TIMEOUT_MS / 1000 + 2
    print(f"controller failover after kill -9: {took:.2f}s (lease TTL {TEST_SESSION_TIMEOUT_MS} ms)")


def test_paused_controller_cannot_write_after_losing_its_lease(make_cluster) -> None:
    c = make_cluster(brokers=1, cleaners=0, coordinators=0, quotas=0)
    old_id, old_epoch = wait_for(lambda: _active(c), 20, what="an active controller")
    victim = c.proc("controller", old_id)
    other = next(p for p in c.procs("controller") if p.id != str(old_id))
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        new = wait_for(
            lambda: (v := c.cluster_view(via=other.info["rest"]))["controller"]
            and v["controller"]["id"] != old_id and v["controller"],
            TEST_SESSION_TIMEOUT_MS / 1000 + 5,
            what="standby to take over from the paused controller",
        )
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    assert new["epoch"] > old_epoch
    # The resumed controller's first act is a fenced write; it must be refused and it must step down.
    wait_for(lambda: "fenced: write refused" in open(victim.log_path).read(), 10, what="fenced write in log")
    wait_for(lambda: "no longer active controller" in open(victim.log_path).read(), 10, what="step down")
    # Its writes never landed: the heartbeat key carries only the new controller's epoch from now on.
    from tests.integration.etcd_probe import read_heartbeat

    for _ in range(5):
        hb = read_heartbeat(c.info["etcd"], c.info["cluster"])
        assert hb["id"] == new["id"] and hb["epoch"] == new["epoch"]
        time.sleep(0.3)
    view = c.cluster_view(via=victim.info["rest"])  # the old one still serves reads, truthfully
    assert view["controller"]["id"] == new["id"]


def test_broker_killed_leaves_and_returns(make_cluster) -> None:
    c = make_cluster(controllers=1, brokers=3, cleaners=0, coordinators=0, quotas=0)
    before = {b["id"]: b for b in c.cluster_view()["brokers"]}
    victim = c.proc("broker", 2)
    os.kill(victim.pid, signal.SIGKILL)
    t0 = time.monotonic()
    wait_for(lambda: 2 not in [b["id"] for b in c.cluster_view()["brokers"]],
             TEST_SESSION_TIMEOUT_MS / 1000 + 3, what="broker 2 to leave")
    gone_after = time.monotonic() - t0
    assert gone_after <= TEST_SESSION_TIMEOUT_MS / 1000 + 2
    c.restart("broker", 2)
    back = wait_for(lambda: {b["id"]: b for b in c.cluster_view()["brokers"]}.get(2), 10, what="broker 2 back")
    assert back["incarnation"] != before[2]["incarnation"]
    assert sorted(b["id"] for b in c.cluster_view()["brokers"]) == [1, 2, 3]


def test_sigterm_stops_a_broker_cleanly_and_deregisters_at_once(make_cluster) -> None:
    c = make_cluster(controllers=1, brokers=2, cleaners=0, coordinators=0, quotas=0)
    victim = c.proc("broker", 1)
    os.kill(victim.pid, signal.SIGTERM)
    assert victim.popen is not None and victim.popen.wait(timeout=15) == 0
    # Revoked lease: gone well before the session timeout would have expired it.
    wait_for(lambda: [b["id"] for b in c.cluster_view()["brokers"]] == [2], 2, what="broker 1 to deregister")
    assert '"msg":"stopped"' in open(victim.log_path).read()


def test_killing_a_foreground_launcher_stops_everything_it_started(tmp_path) -> None:
    """`tidelog up` killed with SIGKILL cannot stop its children; they stop themselves when the pipe
    it alone held closes (services gracefully, etcd through its watcher)."""
    data = str(tmp_path / "fg")
    launcher = subprocess.Popen([sys.executable, "-m", "shared.cli.main", "up", "--data-dir", data, "--brokers", "1",
                                 "--controllers", "1", "--cleaners", "0", "--coordinators", "0", "--quotas", "0",
                                 "--session-timeout-ms", str(TEST_SESSION_TIMEOUT_MS)],
                                cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids: list[int] = []
    try:
        cluster_file = os.path.join(data, "cluster.json")
        wait_for(lambda: os.path.exists(cluster_file), 60, what="the cluster to come up")
        with open(cluster_file) as f:
            procs = json.load(f)["processes"]
        pids = [p["pid"] for p in procs]
        assert {p["role"] for p in procs} == {"etcd", "controller", "broker", "console"}
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(10)
        wait_for(lambda: not any(pid_alive(pid) for pid in pids), 30, what="every child to stop")
        services = [p for p in procs if p["role"] != "etcd"]
        for p in services:  # a graceful stop, not a kill
            log_text = open(os.path.join(data, "logs", f"{p['role']}-{p['id']}.log")).read()
            assert "lifeline closed" in log_text and '"msg":"stopped"' in log_text
        r = subprocess.run([sys.executable, "-m", "shared.cli.main", "status", "--data-dir", data],
                           capture_output=True, text=True, timeout=60, cwd=REPO)
        assert r.returncode == 0 and f"(pid {launcher.pid}) is gone; 0 of 4 processes still run" in r.stdout, r.stdout
    finally:
        launcher.kill()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _run_service(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def test_bad_flags_and_environment_are_rejected_clearly() -> None:
    r = _run_service(["services.broker", "--port", "abc"])
    assert r.returncode == 2 and "--port / TIDELOG_PORT" in r.stderr and "integer" in r.stderr
    r = _run_service(["services.controller"], {"TIDELOG_SESSION_TIMEOUT_MS": "5"})
    assert r.returncode == 2 and "--session-timeout-ms / TIDELOG_SESSION_TIMEOUT_MS" in r.stderr
    r = _run_service(["services.cleaner", "--etcd", "nowhere"])
    assert r.returncode == 2 and "expected host:port" in r.stderr
    r = _run_service(["services.quota", "--no-such-flag", "1"])
    assert r.returncode == 2 and "unrecognized arguments" in r.stderr
    r = _run_service(["services.coordinator"], {"TIDELOG_LOG_LEVEL": "LOUD"})
    assert r.returncode == 2 and "TIDELOG_LOG_LEVEL" in r.stderr
    r = _run_service(["services.broker", "--lifeline-fd", "987"])
    assert r.returncode == 1 and "--lifeline-fd 987: not an open file descriptor" in r.stderr
    r = _run_service(["shared.cli.main", "up", "--brokers", "0"])
    assert r.returncode == 2 and "--brokers" in r.stderr


def test_unreachable_etcd_fails_with_a_message() -> None:
    from shared.cli.launcher import free_port

    r = _run_service(["services.broker", "--etcd", f"127.0.0.1:{free_port()}", "--etcd-connection-timeout-ms", "1500"],
                     {"TIDELOG_DATA_DIR": "/tmp/tidelog-nowhere"})
    assert r.returncode == 1 and "unreachable" in r.stderr


def test_compose_file_is_valid_and_runs_the_launcher_entrypoints() -> None:
    r = subprocess.run(
        ["docker-compose", "-f", "deploy/compose.yaml", "config"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert r.returncode == 0, r.stderr
    config = yaml.safe_load(r.stdout)
    services = config["services"]
    launcher_modules = set(ROLE_MODULES.values())
    roles_seen = set()
    for name, svc in services.items():
        if name == "etcd":
            assert "etcd" in svc["command"][0]
            continue
        if "monitoring" in svc.get("profiles", []):  # Prometheus and Grafana (tests/integration/test_monitoring.py)
            continue
        module = svc["command"][0]
        assert module in launcher_modules, f"{name} runs {module}, which tidelog up does not"
        roles_seen.add(module)
        assert svc["healthcheck"]["test"][1:4] == ["python", "-m", "shared.healthcheck"]
        assert svc["environment"]["TIDELOG_ETCD"] == "etcd:2379"
    assert roles_seen == launcher_modules
    for b in ("broker-1", "broker-2", "broker-3"):
        mounts = [v["target"] if isinstance(v, dict) else v.split(":")[1] for v in services[b]["volumes"]]
        assert "/data" in mounts, f"{b} has no persistent /data volume"
    assert "container_name" not in services["cleaner"]  # scalable with --scale
    assert any("8080" in str(p) for p in services["controller-1"]["ports"])
