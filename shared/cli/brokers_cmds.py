"""``tidelog brokers list|add|describe``: the brokers of a cluster, growing a local one, and disk use.

``add`` starts more broker processes in a running ``tidelog up --detach`` cluster (the one its
cluster.json describes): the next free ids, the same etcd, cluster name and session timeout, recorded
in cluster.json so ``tidelog down`` stops them with the rest. New brokers start empty; moving
replicas onto them is a reassignment (``tidelog reassign``) or the balancer's work.

``describe`` is Kafka's ``kafka-log-dirs.sh --describe``: per broker its log directory, total bytes and
per partition size, offset lag and whether it is a future replica (always false here).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

import click
import httpx
from rich.table import Table

from shared.cli.connect import cluster_options, data_dir_option, http_request, resolve, settings_for, use_settings
from shared.cli.console import out_console
from shared.cli.launcher import ClusterSpec, LaunchError, LocalCluster, read_cluster_file, write_cluster_file
from shared.cli.processes import is_same_process


@click.group()
def brokers() -> None:
    """List brokers, add brokers to a local cluster, describe their disk use."""


def _rest(bootstrap: str | None, rest: str | None, data_dir: str) -> str:
    _, url = resolve(bootstrap, rest, data_dir)
    if not url:
        raise click.ClickException("no REST URL known: pass --rest")
    return url.rstrip("/")


def _get(url: str) -> Any:
    try:
        resp = http_request("GET", url, timeout=30)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"{url}: {exc}") from None
    if resp.status_code >= 400:
        body = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
        raise click.ClickException(f"{body.get('error', resp.status_code)}: {body.get('message', resp.text)}")
    return resp.json()


@brokers.command("list")
@cluster_options
@click.option("--json", "as_json", is_flag=True)
def list_brokers(bootstrap: str | None, rest: str | None, data_dir: str, as_json: bool) -> None:
    """The live brokers (id, address, rack) as the controller sees them."""
    view = _get(f"{_rest(bootstrap, rest, data_dir)}/v1/cluster")
    if as_json:
        click.echo(json.dumps(view["brokers"], indent=2))
        return
    table = Table()
    for col in ("id", "address", "rack", "kafka"):
        table.add_column(col)
    for b in view["brokers"]:
        table.add_row(str(b["id"]), b.get("address") or "", b.get("rack") or "-", b.get("kafka") or "-")
    out_console().print(table)


def _rack_of(argv: list[str]) -> str | None:
    return argv[argv.index("--rack") + 1] if "--rack" in argv and argv.index("--rack") + 1 < len(argv) else None


def next_racks(existing: list[str | None], count: int, rack: str | None) -> list[str | None]:
    """Racks for ``count`` new brokers: ``rack`` for all when given; else, in a racked cluster, the
    least-populated racks in turn (so racks stay even and rack-aware placement stays on); else none."""
    if rack:
        return [rack] * count
    racks = [r for r in existing if r]
    if not racks or len(racks) != len(existing):
        return [None] * count
    counts = Counter(racks)
    out: list[str | None] = []
    for _ in range(count):
        pick = min(sorted(counts), key=lambda r: counts[r])
        counts[pick] += 1
        out.append(pick)
    return out


@brokers.command("add")
@data_dir_option("cluster directory of a running `tidelog up --detach` cluster")
@click.option("--count", default=1, show_default=True, type=click.IntRange(1, 32), help="brokers to start")
@click.option("--rack", default=None, help="rack of the new brokers (default: the least-used racks, if any)")
@click.option("--timeout", default=60.0, show_default=True, help="seconds to wait for the new brokers")
def add(data_dir: str, count: int, rack: str | None, timeout: float) -> None:
    """Start COUNT more brokers in the local cluster; `tidelog down` stops them with the rest."""
    data_dir = os.path.abspath(data_dir)
    info = read_cluster_file(data_dir)
    if info is None:
        raise click.ClickException(f"no cluster.json in {data_dir}: start one with `tidelog up --detach`")
    launcher = info.get("launcher") or {}
    if not launcher.get("detached", True) and is_same_process(
            {"pid": launcher.get("pid", 0), "start_time": launcher.get("start_time")}):
        raise click.ClickException("this cluster runs under a foreground `tidelog up`: brokers added now would "
                                   "outlive its Ctrl-C. Start the cluster with `tidelog up --detach`")
    procs = info["processes"]
    old = [p for p in procs if p["role"] == "broker"]
    ids = [int(p["id"]) for p in old]
    registered = _registered_brokers(info)
    first = max([0, *ids, *registered]) + 1
    racks = next_racks([_rack_of(p.get("argv", [])) for p in old], count, rack)
    lc = LocalCluster(ClusterSpec(data_dir=data_dir, cluster=info["cluster"],
                                  session_timeout_ms=info.get("session_timeout_ms", 6000)), detach=True)
    lc.etcd_endpoint = info["etcd"]
    started = []
    try:
        for i, r in enumerate(racks):
            lc.spec.racks = [r] if r else []
            started.append(lc.start_service("broker", first + i))
        lc.wait_ready(started, timeout)
    except LaunchError as exc:
        lc.stop()
        raise click.ClickException(str(exc)) from None
    info["processes"] = [*procs, *(p.as_dict() for p in started)]
    kafka = [p.info["kafka"] for p in started if p.info.get("kafka")]
    if kafka:
        info["kafka_bootstrap"] = ",".join(filter(None, [info.get("kafka_bootstrap", ""), *kafka]))
    write_cluster_file(data_dir, info)
    for p, r in zip(started, racks):
        click.echo(f"broker {p.id} started at {p.address}" + (f" (rack {r})" if r else ""))
    click.echo("new brokers hold no replicas yet: move some with `tidelog reassign`")


def _registered_brokers(info: dict[str, Any]) -> list[int]:
    """Broker ids the controller knows (a broker started by hand may hold an id cluster.json lacks)."""
    use_settings(settings_for(info))
    for url in info.get("rest_urls") or [info.get("rest")]:
        if not url:
            continue
        try:
            return [int(b["id"]) for b in http_request("GET", f"{url}/v1/cluster", timeout=5).json()["brokers"]]
        except (httpx.HTTPError, ValueError, KeyError):
            continue
    return []


def _human(n: int) -> str:
    if n < 0:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


@brokers.command("describe")
@cluster_options
@click.argument("broker_id", required=False, type=int)
@click.option("--topic", "topics", multiple=True, help="only these topics (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="the REST answer as JSON (Kafka's DescribeLogDirs fields)")
def describe(bootstrap: str | None, rest: str | None, data_dir: str, broker_id: int | None,
             topics: tuple[str, ...], as_json: bool) -> None:
    """Disk use of every broker (or BROKER_ID): log directory, totals and per-partition sizes and lag."""
    url = _rest(bootstrap, rest, data_dir)
    path = f"/v1/brokers/{broker_id}/log-dirs" if broker_id is not None else "/v1/log-dirs"
    query = "&".join(f"topic={t}" for t in topics)
    view = _get(f"{url}{path}" + (f"?{query}" if query else ""))
    if as_json:
        click.echo(json.dumps(view, indent=2))
        return
    console = out_console()
    summary = Table(title="Log directories", title_justify="left")
    for col in ("broker", "log dir", "replicas", "size", "disk total", "disk usable", "error"):
        summary.add_column(col)
    for b in view["brokers"]:
        summary.add_row(str(b["broker"]), b["log_dir"] or "-", str(len(b["partitions"])), _human(b["size"]),
                        _human(b["total_bytes"]), _human(b["usable_bytes"]), b.get("error") or "")
    console.print(summary)
    parts = Table(title="Replicas", title_justify="left")
    for col in ("broker", "topic", "partition", "size", "bytes", "offset lag", "future"):
        parts.add_column(col)
    for b in view["brokers"]:
        for p in sorted(b["partitions"], key=lambda p: (p["topic"], p["partition"])):
            parts.add_row(str(b["broker"]), p["topic"], str(p["partition"]), _human(p["size"]), str(p["size"]),
                          str(p["offset_lag"]), str(p["is_future"]).lower())
    console.print(parts)
