"""How a client finds a local cluster: the data directory (``--data-dir`` / ``TIDELOG_DATA_DIR``) and the
``cluster.json`` that ``tidelog up`` writes there.

Used by the CLI and by ``pipelines/``; it knows nothing of starting or stopping processes (that is the
CLI's launcher) and imports nothing from ``services/`` or ``pipelines/``.
"""

from __future__ import annotations

import json
import os
from typing import Any

CLUSTER_FILE = "cluster.json"
DATA_DIR_ENV = "TIDELOG_DATA_DIR"
FALLBACK_DATA_DIR = ".tidelog"


def default_data_dir() -> str:
    """``$TIDELOG_DATA_DIR``, else ``.tidelog`` in the working directory (read at call time)."""
    return os.environ.get(DATA_DIR_ENV) or FALLBACK_DATA_DIR


def read_cluster_file(data_dir: str) -> dict[str, Any] | None:
    """The ``cluster.json`` of a local cluster, or None when there is none (or it is unreadable)."""
    try:
        with open(os.path.join(data_dir, CLUSTER_FILE)) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def no_cluster_message(data_dir: str, what: str = "--bootstrap-server/--rest") -> str:
    return (f"no cluster found: pass {what}, or point --data-dir / {DATA_DIR_ENV} at the directory of a "
            f"running `tidelog up` (looked in {os.path.abspath(data_dir)})")


def brokers_from_data_dir(data_dir: str | None = None) -> str | None:
    """Comma-separated broker addresses of the local cluster in ``data_dir`` (default: ``default_data_dir()``)."""
    info = read_cluster_file(os.path.abspath(data_dir or default_data_dir()))
    if info is None:
        return None
    brokers = [p.get("client_address") or p["address"] for p in info.get("processes", [])
               if p.get("role") == "broker" and p.get("address")]  # client_address: a secure cluster's TLS port
    return ",".join(brokers) or None


def cluster_data_dir(data_dir: str | None = None) -> str:
    """The absolute data directory a client uses (``data_dir`` or the default)."""
    return os.path.abspath(data_dir or default_data_dir())
