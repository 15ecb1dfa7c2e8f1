"""How CLI commands find a cluster: flags, ``TIDELOG_*`` variables, or a local cluster's cluster.json.

And with which credentials, on a secure cluster (``tidelog up --secure``): ``TIDELOG_SASL_USERNAME`` /
``TIDELOG_SASL_PASSWORD`` (``TIDELOG_SASL_MECHANISM``, default SCRAM-SHA-512), else the admin user of
``cluster.json``'s ``security`` block (``admin_user``, its ``admin_password_file``); the CA from
``TIDELOG_SSL_CAFILE`` or that block's ``ca``. A command then talks SASL_SSL to the brokers' client ports
(the gRPC ``Sasl`` handshake, ``shared.client.security``) and HTTPS with HTTP Basic to the REST API.
``resolve`` records them for the rest of the command: ``client_settings()`` (kafka-python's keyword
arguments for ``Producer``, ``Consumer``, ``Admin``), ``client_security()``, ``http_options()`` and
``http_request()``. A plaintext cluster needs none: all of them are empty.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from shared.client.discovery import DATA_DIR_ENV, FALLBACK_DATA_DIR, no_cluster_message, read_cluster_file

if TYPE_CHECKING:
    import httpx

    from shared.client.security import ClientSecurity

#: Kept for callers that show it; the option itself reads TIDELOG_DATA_DIR when the command runs.
DEFAULT_DATA_DIR = FALLBACK_DATA_DIR
SASL_USERNAME_ENV = "TIDELOG_SASL_USERNAME"
SASL_PASSWORD_ENV = "TIDELOG_SASL_PASSWORD"
SASL_MECHANISM_ENV = "TIDELOG_SASL_MECHANISM"
SSL_CAFILE_ENV = "TIDELOG_SSL_CAFILE"


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
    info = read_cluster_file(os.path.abspath(data_dir))
    use_settings(settings_for(info))
    if bootstrap and rest:
        return bootstrap, rest
    if info is not None:
        if not bootstrap:
            # a client port when the cluster is secure (SCRAM users go there), else the one address
            bootstrap = ",".join(p.get("client_address") or p["address"] for p in info["processes"]
                                 if p["role"] == "broker")
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


# -- credentials ----------------------------------------------------------------------------------------------

_settings: list[dict[str, Any]] = [{}]


def settings_for(info: dict[str, Any] | None) -> dict[str, Any]:
    """kafka-python's security settings for this CLI: ``{}`` for a plaintext cluster. ``info`` is the
    cluster.json of ``--data-dir`` (None when there is none: a remote cluster, then the environment
    variables say it all)."""
    sec = (info or {}).get("security") or {}
    user = os.environ.get(SASL_USERNAME_ENV)
    password = os.environ.get(SASL_PASSWORD_ENV)
    cafile = os.environ.get(SSL_CAFILE_ENV) or sec.get("ca")
    if not (user or sec):
        return {}
    if not cafile:
        raise click.ClickException(f"{SASL_USERNAME_ENV} needs the cluster's CA certificate: set {SSL_CAFILE_ENV}")
    if user:
        if not password:
            raise click.ClickException(f"{SASL_USERNAME_ENV} is set but {SASL_PASSWORD_ENV} is not")
    else:
        user = sec.get("admin_user")
        path = sec.get("admin_password_file")
        if not user or not path:
            raise click.ClickException("cluster.json's security names no admin user: set "
                                       f"{SASL_USERNAME_ENV} and {SASL_PASSWORD_ENV}")
        try:
            with open(path) as f:
                password = f.read().strip()
        except OSError as exc:
            raise click.ClickException(f"cannot read the admin password ({exc}): set {SASL_USERNAME_ENV} and "
                                       f"{SASL_PASSWORD_ENV}") from None
    return {"security_protocol": "SASL_SSL",
            "sasl_mechanism": os.environ.get(SASL_MECHANISM_ENV) or "SCRAM-SHA-512",
            "sasl_plain_username": user, "sasl_plain_password": password, "ssl_cafile": cafile}


def use_settings(settings: dict[str, Any]) -> None:
    """The credentials for the rest of this command (``resolve`` calls it)."""
    _settings[0] = settings
    _security.clear()


def client_settings(data_dir: str | None = None) -> dict[str, Any]:
    """kafka-python's keyword arguments for ``Producer`` / ``Consumer`` / ``Admin``: those ``resolve``
    found, or those of ``data_dir``'s cluster.json when given."""
    if data_dir is not None:
        return settings_for(read_cluster_file(os.path.abspath(data_dir)))
    return dict(_settings[0])


_security: dict[str, ClientSecurity | None] = {}


def client_security() -> ClientSecurity | None:
    """The ``ClientSecurity`` of the current settings (one per command: its sessions are shared), None when plaintext."""
    if "current" not in _security:
        from shared.client.security import client_security as build

        _security["current"] = build(**_settings[0]) if _settings[0] else None
    return _security["current"]


def http_options() -> dict[str, Any]:
    """``httpx`` keyword arguments for the REST API: ``{}`` when plaintext, else the CA and HTTP Basic."""
    sec = client_security()
    return {} if sec is None else sec.http_options()


def http_request(method: str, url: str, **kw: Any) -> httpx.Response:
    """``httpx.request`` with the command's REST credentials (``http_options``)."""
    import httpx

    return httpx.request(method, url, **http_options(), **kw)
