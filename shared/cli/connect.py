"""How CLI commands find a cluster: flags, ``TIDELOG_*`` variables, or a local cluster's cluster.json."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from shared.client.discovery import DATA_DIR_ENV, FALLBACK_DATA_DIR, no_cluster_message, read_cluster_file

#: Kept for callers that show it; the option itself reads TIDELOG_DATA_DIR when the command runs.
DEFAULT_DATA_DIR = FALLBACK_DATA_DIR


def data_dir_option(help_text: str = "local cluster directory holding cluster.json") -> Callable[..., Any]:
    """``--data-dir``, taken from ``TIDELOG_DATA_DIR`` when not given (set it once for a whole session)."""
    return click.option("--data-dir", envvar=DATA_DIR_ENV, default=FALLBACK_DATA_DIR, show_default=True,
                        show_envvar=True, type=click.Path(file_okay=False), help=help_text)


def cluster_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--bootstrap-server", "bootstrap", envvar="TIDELOG_BOOTSTRAP_SERVERS", default=None,
                     help="broker host:port[,host:port] (env TIDELOG_BOOTSTRAP_SERVERS; default: from --data-dir)")(f)
    f = click.option("--rest", envvar="TIDELOG_REST", default=None,
                     help="REST admin URL (env TIDELOG_REST; default: from --data-dir or the brokers)")(f)
    f = data_dir_option()(f)
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
        raise click.ClickException(no_cluster_message(data_dir))
    return bootstrap, rest


def bootstrap_servers(bootstrap: str | None, rest: str | None, data_dir: str) -> str:
    b, _ = resolve(bootstrap, rest, data_dir)
    if not b:
        raise click.ClickException("no brokers known: pass --bootstrap-server")
    return b
