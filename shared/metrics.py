"""Prometheus metrics helpers shared by every role.

Each service process serves ``/metrics`` (Prometheus text format, ``prometheus_client``'s default
registry: the process, platform and GC collectors plus the role's own metrics) on
``--metrics-port`` / ``TIDELOG_METRICS_PORT`` (0: any free port, -1: off), on the service's host.
Names carry the ``tidelog_`` prefix and Kafka's concepts and units (seconds, bytes, ``_total``).

``scrape`` and ``parse`` read an endpoint back into ``{(name, labels): value}`` for ``tidelog top``
and the tests.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable

from prometheus_client import disable_created_metrics, start_http_server
from prometheus_client.parser import text_string_to_metric_families

PREFIX = "tidelog_"
#: Latency buckets (seconds) for request stages: 50 µs .. 30 s, Kafka's requests span that range.
LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                   0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]


def start_metrics_server(host: str, port: int) -> int | None:
    """Serve ``/metrics`` on ``host:port`` in a daemon thread; returns the bound port (None when off)."""
    if port < 0:
        return None
    disable_created_metrics()  # no *_created series: they double every counter's series for nothing
    server, _thread = start_http_server(port, addr=host)
    return int(server.server_port)


def parse(text: str) -> Samples:
    """Prometheus text → ``{(sample name, sorted labels): value}``."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def scrape(address: str, timeout: float = 2.0) -> Samples:
    """Fetch and parse ``http://<address>/metrics``."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout) as resp:  # noqa: S310 (our own endpoint)
        return parse(resp.read().decode())


def total(samples: Samples, name: str, **match: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``match``."""
    want = set(match.items())
    return sum(v for (n, labels), v in samples.items() if n == name and want <= set(labels))


def label_values(samples: Samples, name: str, label: str) -> Iterable[str]:
    return sorted({dict(labels).get(label, "") for (n, labels) in samples if n == name})


def histogram_quantile(samples: Samples, name: str, q: float, **match: str) -> float | None:
    """The ``q`` quantile of histogram ``name`` (summed over other labels), Prometheus' interpolation."""
    buckets: dict[float, float] = {}
    want = set(match.items())
    for (n, labels), v in samples.items():
        if n == f"{name}_bucket" and want <= set(labels):
            le = float(dict(labels)["le"])
            buckets[le] = buckets.get(le, 0.0) + v
    return quantile_from_buckets(sorted(buckets.items()), q)


def quantile_from_buckets(buckets: list[tuple[float, float]], q: float) -> float | None:
    """``buckets``: sorted ``(upper bound, cumulative count)`` with ``+Inf`` last."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return prev_bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return prev_bound
