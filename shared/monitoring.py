"""A local Prometheus server for ``tidelog up --monitoring``.

``scrape_config`` writes one job per role whose targets are the processes' ``/metrics`` addresses
(from cluster.json), plus etcd's own metrics. ``prometheus_argv`` runs Debian's ``prometheus`` on
127.0.0.1 with its data under the cluster's data directory. The configuration is written as JSON,
which is valid YAML, so no YAML library is needed at run time.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from typing import Any

SCRAPE_INTERVAL_S = 2


def scrape_config(processes: Iterable[dict[str, Any]], interval_s: int = SCRAPE_INTERVAL_S,
                  cluster: str = "tidelog") -> dict[str, Any]:
    """The Prometheus configuration scraping every process that lists a ``metrics`` address."""
    jobs: dict[str, list[dict[str, Any]]] = {}
    for p in processes:
        address = p.get("metrics")
        if not address:
            continue
        jobs.setdefault(f"tidelog-{p['role']}", []).append(
            {"targets": [address], "labels": {"instance_id": str(p["id"]), "role": p["role"]}})
    return {
        "global": {"scrape_interval": f"{interval_s}s", "evaluation_interval": f"{interval_s}s",
                   "external_labels": {"cluster": cluster}},
        "scrape_configs": [{"job_name": job, "static_configs": groups} for job, groups in sorted(jobs.items())],
    }


def write_config(directory: str, config: dict[str, Any]) -> str:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "prometheus.yml")
    with open(path + ".tmp", "w") as f:
        json.dump(config, f, indent=2)
    os.replace(path + ".tmp", path)
    return path


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def prometheus_argv(binary: str, config_path: str, data_dir: str, port: int) -> list[str]:
    """Listen on 127.0.0.1 only; keep the TSDB small (a local cluster's metrics, for a day)."""
    return [binary, f"--config.file={config_path}", f"--storage.tsdb.path={data_dir}",
            f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d",
            "--web.enable-lifecycle", "--log.level=warn"]
