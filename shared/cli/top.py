"""``tidelog top``: a live view of the cluster from every process's /metrics.

The metrics endpoints come from cluster.json for a local cluster (``--data-dir``), else from the
REST API's ``/v1/cluster`` (``--rest``, or found through ``--bootstrap-server``): every process
registers its ``metrics`` address in etcd next to its gRPC address.
"""

from __future__ import annotations

import time

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from shared.cli.connect import client_settings, cluster_options
from shared.cli.console import out_console
from shared.client.discovery import read_cluster_file
from shared.metrics import Samples, scrape
from shared.top_view import BrokerRow, GroupRow, broker_row, group_lags, group_rows


def endpoints(data_dir: str, bootstrap: str | None, rest: str | None) -> list[tuple[str, str, str]]:
    """(role, id, metrics address) of every process that serves /metrics."""
    if not bootstrap and not rest:
        info = read_cluster_file(data_dir)
        if info is not None:
            return [(p["role"], str(p["id"]), p["metrics"]) for p in info["processes"] if p.get("metrics")]
    from shared.client import Admin

    try:
        with Admin(bootstrap, rest_url=rest, **client_settings(data_dir)) as admin:
            view = admin.cluster()
    except Exception as exc:
        raise click.ClickException(f"cannot read the cluster's members: {exc}") from None
    found = [("broker", str(b["id"]), b.get("metrics")) for b in view.get("brokers", [])]
    found += [("controller", c["id"], c.get("metrics")) for c in view.get("controllers", [])]
    for role, instances in view.get("services", {}).items():
        found += [(role, i["id"], i.get("metrics")) for i in instances]
    return [(r, i, m) for r, i, m in found if m]


def scrape_all(targets: list[tuple[str, str, str]]) -> dict[tuple[str, str], Samples | None]:
    out: dict[tuple[str, str], Samples | None] = {}
    for role, ident, address in targets:
        try:
            out[(role, ident)] = scrape(address, timeout=2.0)
        except OSError:
            out[(role, ident)] = None
    return out


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def render(brokers: list[BrokerRow], groups: list[GroupRow], interval: float) -> Group:
    bt = Table(title=f"Brokers (rates over the last {interval:.1f}s)", title_justify="left")
    for col in ("broker", "records/s in", "MB/s in", "MB/s out", "produce p50 ms", "produce p99 ms",
                "fetch p50 ms", "fetch p99 ms", "under-replicated"):
        bt.add_column(col, justify="right")
    for b in brokers:
        if not b.up:
            bt.add_row(b.id, "[red]no metrics[/]", *[""] * 7)
            continue
        urp = f"[red]{b.under_replicated}[/]" if b.under_replicated else "0"
        bt.add_row(b.id, f"{b.records_in_s:,.0f}", f"{b.mb_in_s:.2f}", f"{b.mb_out_s:.2f}", _ms(b.produce_p50_ms),
                   _ms(b.produce_p99_ms), _ms(b.fetch_p50_ms), _ms(b.fetch_p99_ms), urp)
    gt = Table(title="Consumer groups", title_justify="left")
    for col in ("group", "lag", "trend"):
        gt.add_column(col, justify="right")
    for g in groups:
        gt.add_row(g.group, f"{g.lag:,}", f"{g.trend} {g.delta:+,}" if g.delta else g.trend)
    return Group(bt, gt)


class TopState:
    def __init__(self, targets: list[tuple[str, str, str]]) -> None:
        self.targets = targets
        self.prev: dict[tuple[str, str], Samples | None] = {}
        self.prev_lags: dict[str, int] | None = None
        self.prev_t = 0.0

    def frame(self) -> tuple[list[BrokerRow], list[GroupRow], float]:
        now = time.monotonic()
        cur = scrape_all(self.targets)
        seconds = now - self.prev_t if self.prev_t else 0.0
        brokers = [broker_row(i, self.prev.get((r, i)), cur[(r, i)], seconds)
                   for r, i, _ in sorted(self.targets, key=lambda t: (t[1].zfill(8))) if r == "broker"]
        lags = group_lags([s for (r, _), s in cur.items() if r == "coordinator" and s is not None])
        groups = group_rows(self.prev_lags, lags)
        self.prev, self.prev_lags, self.prev_t = cur, lags, now
        return brokers, groups, seconds


@click.command()
@cluster_options
@click.option("--interval", default=2.0, show_default=True, type=click.FloatRange(0.1, 3600), help="seconds between frames")
@click.option("--once", is_flag=True, help="print one frame (rates over one interval) and exit")
def top(data_dir: str, bootstrap: str | None, rest: str | None, interval: float, once: bool) -> None:
    """Live view: per broker records/s, MB/s, latency p50/p99, under-replicated partitions; per group lag."""
    targets = endpoints(data_dir, bootstrap, rest)
    if not any(role == "broker" for role, _, _ in targets):
        raise click.ClickException("no broker serves /metrics (started with --metrics-port -1?)")
    state = TopState(targets)
    state.frame()
    console = out_console() if once else Console()
    if once:
        time.sleep(interval)
        console.print(render(*state.frame()))
        return
    try:
        with Live(console=console, refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(interval)
                live.update(render(*state.frame()))
    except KeyboardInterrupt:
        pass

