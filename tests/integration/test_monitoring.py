"""The monitoring stack, checked by the real tools: promtool on the scrape configurations, docker-compose
on the `monitoring` profile, the dashboard's queries against the metric names the services export,
and `tidelog up --monitoring` running a real Prometheus whose HTTP API sees every target up."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid

import httpx
import yaml

from shared.monitoring import scrape_config, write_config
from tests.conftest import REPO, wait_for

DEPLOY = os.path.join(REPO, "deploy")


def promtool_check(path: str) -> None:
    r = subprocess.run(["promtool", "check", "config", path], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_prometheus_configurations_pass_promtool(tmp_path) -> None:
    promtool_check(os.path.join(DEPLOY, "prometheus", "prometheus.yml"))
    generated = write_config(str(tmp_path), scrape_config([
        {"role": "broker", "id": "1", "metrics": "127.0.0.1:9101"}, {"role": "broker", "id": "2", "metrics": "127.0.0.1:9102"},
        {"role": "controller", "id": "1", "metrics": "127.0.0.1:9103"}, {"role": "etcd", "id": "etcd"}]))
    promtool_check(generated)


def test_compose_monitoring_profile_provisions_prometheus_and_grafana() -> None:
    r = subprocess.run(["docker-compose", "-f", "deploy/compose.yaml", "--profile", "monitoring", "config"],
                       capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
    services = yaml.safe_load(r.stdout)["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"]
        assert all(str(p).startswith("127.0.0.1:") for p in services[name]["ports"]), services[name]["ports"]
    assert services["broker-1"]["environment"]["TIDELOG_METRICS_PORT"] == "9100"
    sources = {v["source"] if isinstance(v, dict) else v.split(":")[0] for v in services["grafana"]["volumes"]}
    assert os.path.join(DEPLOY, "grafana", "dashboards") in sources


def exported_names() -> set[str]:
    """Every tidelog_* metric name spelled in the services' and shared code."""
    names: set[str] = set()
    for root in ("services", "shared"):
        for dirpath, _, files in os.walk(os.path.join(REPO, root)):
            for f in files:
                if f.endswith(".py"):
                    with open(os.path.join(dirpath, f)) as fh:
                        names |= set(re.findall(r'"(tidelog_[a-z_]+)"', fh.read()))
    return names


def test_dashboard_queries_only_metrics_the_services_export() -> None:
    with open(os.path.join(DEPLOY, "grafana", "dashboards", "tidelog-overview.json")) as f:
        dash = json.load(f)
    names = exported_names()
    titles = " ".join(p["title"] for p in dash["panels"]).lower()
    for word in ("records in", "latency", "under-replicated", "lag"):
        assert word in titles
    for panel in dash["panels"]:
        for target in panel["targets"]:
            for metric in re.findall(r"tidelog_[a-z_]+", target["expr"]):
                base = re.sub(r"_(total|bucket|sum|count)$", "", metric)
                assert metric in names or base in names, f"{panel['title']}: {metric} is not exported"


def test_up_monitoring_runs_a_prometheus_that_scrapes_every_service(tmp_path) -> None:
    data = str(tmp_path / "c")
    env = {**os.environ, "TIDELOG_OFFSETS_TOPIC_NUM_PARTITIONS": "2"}
    cli = [sys.executable, "-m", "shared.cli.main"]
    r = subprocess.run([*cli, "up", "--detach", "--monitoring", "--data-dir", data, "--controllers", "1",
                        "--brokers", "1", "--cleaners", "1", "--quotas", "1"],
                       capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        url = re.search(r"Prometheus (http://127\.0\.0\.1:\d+)", r.stdout).group(1)  # printed for the user
        with open(os.path.join(data, "cluster.json")) as f:
            info = json.load(f)
        assert info["prometheus"] == url
        assert os.path.isdir(os.path.join(data, "prometheus", "data"))  # its TSDB lives with the cluster
        roles = {p["role"] for p in info["processes"] if p.get("metrics")}
        assert roles == {"controller", "broker", "coordinator", "cleaner", "quota"}

        def all_up() -> bool:
            targets = httpx.get(f"{url}/api/v1/targets", timeout=3).json()["data"]["activeTargets"]
            return len(targets) == 5 and all(t["health"] == "up" for t in targets)

        wait_for(all_up, 30, interval=0.5, what="every target up")
        topic = f"mon-{uuid.uuid4().hex[:6]}"
        subprocess.run([*cli, "topics", "create", topic, "--data-dir", data], check=True, capture_output=True,
                       cwd=REPO, env=env, timeout=60)

        def query(q: str) -> list:
            return httpx.get(f"{url}/api/v1/query", params={"query": q}, timeout=3).json()["data"]["result"]

        def values(q: str) -> list[float]:
            return [float(s["value"][1]) for s in query(q)]

        records_in = f'tidelog_broker_topic_messages_in_total{{topic="{topic}"}}'
        # The broker starts a topic's series at 0 when it learns the topic, so a rate sees the first records.
        wait_for(lambda: values(records_in) == [0.0], 30, interval=0.5, what="the new topic's series at 0")
        produced = subprocess.run([*cli, "produce", topic, "--data-dir", data], input="a\nb\nc\n", capture_output=True,
                                  text=True, cwd=REPO, env=env, timeout=60)
        assert produced.returncode == 0, produced.stderr
        wait_for(lambda: values(records_in) == [3.0], 30, interval=0.5, what="records in visible in Prometheus")
        assert values(f"increase({records_in}[1m])")[0] > 0  # throughput moves on a graph
        assert [s["value"][1] for s in query("tidelog_controller_active_controller_count")] == ["1"]
        assert query("process_resident_memory_bytes{job='tidelog-quota'}")  # default process collectors
    finally:
        subprocess.run([*cli, "down", "--data-dir", data], capture_output=True, cwd=REPO, timeout=60)


def test_a_taken_metrics_port_is_a_clear_error() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "services.quota", "--metrics-port", str(port), "--etcd", "127.0.0.1:1"],
                           capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip() == f"quota: cannot serve /metrics on 127.0.0.1:{port} (Address already in use)"
