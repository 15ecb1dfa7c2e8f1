"""How CLI commands find a cluster: flags, ``TIDELOG_*`` variables, or a local cluster's cluster.json."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from shared.cli.launcher import read_cluster_file

DEFAULT_DATA_DIR = os.environ.get("TIDELOG_DATA_DIR", ".tidelog")


def cluster_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--bootstrap-server", "bootstrap", envvar="TIDELOG_BOOTSTRAP_SERVERS", default=None,
                     help="broker host:port[,host:port] (env TIDELOG_BOOTSTRAP_SERVERS; default: from --data-dir)")(f)
    f = click.option("--rest", envvar="TIDELOG_REST", default=None,
                     help="REST admin URL (env TIDELOG_REST; default: from --data-dir or the brokers)")(f)
    f = click.option("--data-dir", default=DEFAULT_DATA_DIR, show_default=True, type=click.Path(file_okay=False),
                     help="local cluster directory holding cluster.json")(f)
    return f


def resolve(bootstrap: str | None, rest: str | None, data_dir: str) -> tuple[str | None, str | None]:
    if bootstrap and rest:
        return bootstrap, rest
    info = read_cluster_file(os.path.abspath(data_dir))
    if info is not None:
        if not bootstrap:
            bootstrap = ",".join(p["address"] for p in info["processes"] if p["role"] == "broker")
        if not rest:
            rest = info.get("rest")
    if not bootstrap and not rest:
        raise click.ClickException(
            f"no cluster found: pass --bootstrap-server/--rest or start one with `tidelog up` (looked in {data_dir})"
        )
    return bootstrap, rest


def bootstrap_servers(bootstrap: str | None, rest: str | None, data_dir: str) -> str:
    b, _ = resolve(bootstrap, rest, data_dir)
    if not b:
        raise click.ClickException("no brokers known: pass --bootstrap-server")
    return b
