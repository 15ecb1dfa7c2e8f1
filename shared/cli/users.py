"""``tidelog users create|delete|list``: SCRAM users (Kafka's ``kafka-configs.sh --entity-type users
--add-config SCRAM-SHA-512=[iterations=8192,password=...]``), through the REST API (``/v1/users``)::

    tidelog users create alice --password s3cret --mechanism SCRAM-SHA-512 --iterations 8192
    tidelog users list
    tidelog users delete alice [--mechanism SCRAM-SHA-256]

Without ``--password``, ``create`` asks for it (hidden, twice). The cluster keeps only the salted credential.
Bad flags exit with status 2.
"""

from __future__ import annotations

import json

import click

from shared.cli.acls import admin_client, call
from shared.cli.connect import cluster_options
from shared.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS

_MECHANISM = click.Choice(sorted(MECHANISMS), case_sensitive=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def users() -> None:
    """Create, delete and list SCRAM users (SCRAM-SHA-256, SCRAM-SHA-512)."""


def _name(name: str) -> str:
    if not name or "/" in name or any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in name) or len(name) > 255:
        raise click.BadParameter(f"expected 1-255 characters without '/' or control characters, got {name!r}",
                                 param_hint="NAME")
    return name


@users.command()
@click.argument("name")
@click.option("--password", prompt=True, hide_input=True, confirmation_prompt=True,
              help="the user's password (asked for when absent)")
@click.option("--mechanism", type=_MECHANISM, default="SCRAM-SHA-512", show_default=True)
@click.option("--iterations", type=click.IntRange(MIN_ITERATIONS, MAX_ITERATIONS), default=DEFAULT_ITERATIONS,
              show_default=True, help="PBKDF2 iterations")
@cluster_options
def create(name: str, password: str, mechanism: str, iterations: int, bootstrap: str | None, rest: str | None,
           data_dir: str) -> None:
    """Create user NAME, or replace its credential for the mechanism."""
    if not password:
        raise click.BadParameter("must not be empty", param_hint="--password")
    body = {"name": _name(name), "password": password, "mechanism": mechanism.upper(), "iterations": iterations}
    with admin_client(bootstrap, rest, data_dir) as admin:
        got = call(admin, "POST", "/v1/users", json=body)
    verb = "Created user" if got["created"] else "Replaced the credential of user"
    click.echo(f"{verb} {name!r} ({got['mechanism']}, iterations={got['iterations']}); principal User:{name}")


@users.command()
@click.argument("name")
@click.option("--mechanism", type=_MECHANISM, default=None, help="only this mechanism's credential (default: all)")
@cluster_options
def delete(name: str, mechanism: str | None, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Delete user NAME (or one mechanism's credential)."""
    params = {"mechanism": mechanism.upper()} if mechanism else {}
    with admin_client(bootstrap, rest, data_dir) as admin:
        call(admin, "DELETE", f"/v1/users/{_name(name)}", params=params)
    click.echo(f"Deleted {mechanism.upper() + ' credential of ' if mechanism else ''}user {name!r}")


@users.command(name="list")
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def list_(as_json: bool, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Users with their mechanisms and iteration counts (never credentials)."""
    with admin_client(bootstrap, rest, data_dir) as admin:
        found = call(admin, "GET", "/v1/users")["users"]
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    if not found:
        click.echo("No users.")
    for u in found:
        creds = ", ".join(f"{m['mechanism']}=iterations={m['iterations']}" for m in u["mechanisms"])
        click.echo(f"SCRAM credential configs for user-principal '{u['name']}' are {creds}")
