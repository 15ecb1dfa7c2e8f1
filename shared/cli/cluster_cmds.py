"""``tidelog up``, ``tidelog down`` and ``tidelog status``."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from typing import Any

import click
from pydantic import ValidationError
from rich.console import Console
from rich.live import Live
from rich.table import Table

from shared.cli.connect import data_dir_option as cluster_dir_option
from shared.cli.console import out_console
from shared.cli.launcher import (
    ClusterSpec,
    LaunchError,
    LocalCluster,
    cluster_status,
    read_cluster_file,
    stop_processes,
)
from shared.monitoring import SCRAPE_INTERVAL_S
from shared.settings import ServiceSettings

data_dir_option = cluster_dir_option("cluster directory: cluster.json, logs and every process's data")


def status_table(status: dict[str, Any]) -> Table:
    view = status.get("view") or {}
    ctl = view.get("controller") or {}
    title = (
        f"Tidelog cluster '{status['cluster']}' — REST {status.get('rest')} — etcd {status['etcd']} — "
        f"active controller {ctl.get('id', '?')} (epoch {ctl.get('epoch', '?')})"
    )
    table = Table(title=title, title_justify="left")
    for col in ("role", "id", "address", "pid", "state"):
        table.add_column(col)
    for p in status["processes"]:
        state = "[green]healthy[/]" if p["healthy"] else "[yellow]alive[/]" if p["alive"] else "[red]down[/]"
        if p["role"] == "controller" and str(ctl.get("id")) == str(p["id"]):
            state += " (active)"
        table.add_row(p["role"], str(p["id"]), p["address"], str(p["pid"]), state)
    return table


def _check_cluster_name(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", value):
        raise click.BadParameter(f"{value!r}: use 1-64 letters, digits, '.', '_' or '-'")
    return value


def _check_service_environment() -> None:
    """Every service reads TIDELOG_* variables (flags win over them): refuse bad ones before starting."""
    try:
        ServiceSettings(_cli_parse_args=[])  # type: ignore[call-arg]
    except ValidationError as exc:
        problems = "; ".join(
            f"TIDELOG_{'_'.join(str(p) for p in e['loc']).upper()}={e.get('input')!r}: {e['msg']}" for e in exc.errors())
        raise click.UsageError(f"invalid environment: {problems}") from None


@click.command()
@data_dir_option
@click.option("--detach", is_flag=True, help="return once every service is healthy; stop with `tidelog down`")
@click.option("--controllers", default=2, show_default=True, type=click.IntRange(1, 9))
@click.option("--brokers", default=3, show_default=True, type=click.IntRange(1, 32))
@click.option("--coordinators", default=1, show_default=True, type=click.IntRange(0, 9))
@click.option("--cleaners", default=2, show_default=True, type=click.IntRange(0, 32))
@click.option("--quotas", default=1, show_default=True, type=click.IntRange(0, 9))
@click.option("--consoles", default=1, show_default=True, type=click.IntRange(0, 1),
              help="web consoles (0: none); its URL is printed and written under `console` in cluster.json")
@click.option("--cluster", default="tidelog", show_default=True, envvar="TIDELOG_CLUSTER", show_envvar=True,
              callback=_check_cluster_name, help="cluster name (etcd key prefix), passed on to every service")
@click.option("--session-timeout-ms", default=6000, show_default=True, type=click.IntRange(1000, 600_000),
              envvar="TIDELOG_SESSION_TIMEOUT_MS", show_envvar=True,
              help="etcd lease TTL of every service (failover time), passed on to every service")
@click.option("--rack", "racks", multiple=True, help="rack names assigned to brokers round-robin (repeatable)")
@click.option("--timeout", default=60.0, show_default=True, help="seconds to wait for health")
@click.option("--monitoring", is_flag=True, help="also start a local Prometheus (127.0.0.1, free port) scraping "
                                                 "every service's /metrics, and print its URL")
@click.option("--secure", is_flag=True,
              help="TLS on every door (mutual TLS between services, etcd with client certificates), SCRAM users, "
                   "ACLs enforced: creates a CA, a certificate per service and the admin credential in "
                   "<data dir>/pki (no web console)")
def up(data_dir: str, detach: bool, controllers: int, brokers: int, coordinators: int, cleaners: int,
       quotas: int, cluster: str, session_timeout_ms: int, racks: tuple[str, ...], timeout: float,
       monitoring: bool = False, consoles: int = 1, secure: bool = False) -> None:
    """Start etcd and every Tidelog service on 127.0.0.1.

    Plaintext by default (anyone who can reach 127.0.0.1 can do anything); `--secure` for TLS,
    authentication and ACLs.

    The services also read any other TIDELOG_* variable of this environment (e.g. TIDELOG_LOG_LEVEL);
    a bad value is refused here, before anything starts.
    """
    _check_service_environment()
    spec = ClusterSpec(data_dir, controllers, brokers, coordinators, cleaners, quotas, cluster,
                       session_timeout_ms, list(racks), monitoring=monitoring, consoles=consoles, secure=secure)
    lc = LocalCluster(spec, detach=detach)
    console = Console(stderr=True)
    try:
        with console.status("starting etcd and services…"):
            info = lc.start(timeout)
    except LaunchError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(how_to_connect(info))
    if info.get("prometheus"):
        click.echo(f"Prometheus {info['prometheus']} (scraping every service every {SCRAPE_INTERVAL_S} s)")
    if info.get("console"):
        click.echo(f"Web console {info['console']}")
    if detach:
        click.echo(f"cluster healthy in {info['startup_s']:.1f}s; REST {info['rest']}; "
                   f"Kafka bootstrap {info.get('kafka_bootstrap') or '-'}; "
                   f"details in {os.path.join(lc.data_dir, 'cluster.json')}")
        return
    stop = {"now": False}

    def on_signal(*_: Any) -> None:
        stop["now"] = True

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    console.print(f"cluster healthy in {info['startup_s']:.1f}s — REST API {info['rest']} (docs at {info['rest']}/docs), "
                  f"Kafka bootstrap {info.get('kafka_bootstrap') or '-'}. Ctrl-C stops everything.")
    try:
        with Live(status_table(cluster_status(info)), console=console, refresh_per_second=1) as live:
            while not stop["now"]:
                for _ in range(20):
                    if stop["now"]:
                        break
                    time.sleep(0.1)
                live.update(status_table(cluster_status(info)))
    finally:
        console.print("stopping…")
        lc.stop()
        os.unlink(os.path.join(lc.data_dir, "cluster.json"))
        console.print("stopped")


def how_to_connect(info: dict[str, Any]) -> str:
    """One line for a plaintext cluster; for a secure one, where the credentials are and how to use them."""
    sec = info.get("security")
    if not sec:
        return ("security: PLAINTEXT on 127.0.0.1 (no TLS, no authentication, no ACLs: anyone on this host can "
                "do anything; `tidelog up --secure` for TLS, SCRAM and ACLs)")
    brokers = [p for p in info.get("processes", []) if p.get("role") == "broker"]
    scram_bootstrap = ",".join(str(p.get("client_address") or p.get("address")) for p in brokers)
    cert_bootstrap = ",".join(str(p.get("address")) for p in brokers)
    return "\n".join([
        "security: SSL — TLS on every door, mutual TLS between services and to etcd, ACLs enforced "
        "(allow.everyone.if.no.acl.found=false)",
        f"  CA certificate      {sec['ca']}",
        f"  admin (SCRAM)       user {sec['admin_user']}, password in {sec['admin_password_file']} (0600)",
        f"  admin certificate   {sec['admin_cert']} / {sec['admin_key']}",
        f"  REST API            {info.get('rest')} (HTTP Basic with a SCRAM user), e.g.",
        f"      curl --cacert {sec['ca']} -u {sec['admin_user']}:$(cat {sec['admin_password_file']}) "
        f"{info.get('rest')}/v1/cluster",
        "  tidelog CLI         uses the admin from cluster.json (or TIDELOG_SASL_USERNAME / TIDELOG_SASL_PASSWORD)",
        "  Python client       security_protocol='SASL_SSL', sasl_mechanism='SCRAM-SHA-512', "
        f"sasl_plain_username='{sec['admin_user']}', sasl_plain_password=<the file>, ssl_cafile='{sec['ca']}'",
        f"      bootstrap_servers='{scram_bootstrap}' (the brokers' client TLS ports)",
        "  with a certificate  security_protocol='SSL', ssl_certfile=..., ssl_keyfile=..., ssl_cafile=... and "
        f"bootstrap_servers='{cert_bootstrap}'",
        "      (the mutual-TLS ports: the certificate is the principal; on the client ports it is not asked for)",
        "  add users and ACLs  tidelog users create NAME --password P; tidelog acls add --allow-principal User:NAME ...",
    ])


@click.command()
@data_dir_option
def down(data_dir: str) -> None:
    """Stop a cluster started with `tidelog up --detach`."""
    info = read_cluster_file(os.path.abspath(data_dir))
    if info is None:
        raise click.ClickException(f"no cluster.json in {os.path.abspath(data_dir)}: nothing to stop "
                                   "(pass --data-dir or set TIDELOG_DATA_DIR)")
    killed = stop_processes(info["processes"])  # returns once every process has exited
    os.unlink(os.path.join(os.path.abspath(data_dir), "cluster.json"))
    if killed:
        names = ", ".join(f"{p['role']} {p['id']}" for p in killed)
        click.echo(f"stopped ({names} did not stop in time and were killed)")
    else:
        click.echo("stopped")


@click.command()
@data_dir_option
@click.option("--json", "as_json", is_flag=True)
def status(data_dir: str, as_json: bool) -> None:
    """Who is alive, the active controller and its epoch."""
    info = read_cluster_file(os.path.abspath(data_dir))
    if info is None:
        raise click.ClickException(f"no cluster.json in {os.path.abspath(data_dir)}: is a cluster running "
                                   "(`tidelog up --detach`)? Pass --data-dir or set TIDELOG_DATA_DIR")
    st = cluster_status(info)
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    out_console().print(status_table(st))
    launcher = st.get("launcher")
    if launcher and not launcher["detached"] and not launcher["alive"]:
        running = sum(p["alive"] for p in st["processes"])
        click.echo(f"the `tidelog up` that started this cluster (pid {launcher['pid']}) is gone; "
                   f"{running} of {len(st['processes'])} processes still run"
                   + (": stop them with `tidelog down`" if running else ""))
