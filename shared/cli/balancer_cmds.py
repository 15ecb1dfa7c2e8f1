"""``tidelog balancer status|pause|resume``: the controller's continuous balancer (``/v1/balancer``).

``status`` shows whether it is enabled and paused, the last check and why it found the cluster out of
balance, its moves in flight with their goals (racks, availability, replicas, leaders, bytes) and the
last plan; ``--json`` prints the REST answer as is. ``pause`` starts no new move (the moves in flight
complete; the pause survives a controller failover); ``resume`` lets it plan again.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click
import httpx

from shared.cli.connect import cluster_options, http_request, resolve


def _url(bootstrap: str | None, rest: str | None, data_dir: str) -> str:
    _, url = resolve(bootstrap, rest, data_dir)
    if not url:
        raise click.ClickException("no REST URL known: pass --rest")
    return url.rstrip("/")


def _call(method: str, url: str) -> Any:
    try:
        resp = http_request(method, url, timeout=30)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"{url}: {exc}") from None
    if resp.status_code >= 400:
        try:
            body = resp.json()
        except ValueError:
            body = {}
        raise click.ClickException(f"{body.get('error', resp.status_code)}: {body.get('message', resp.text)}")
    return resp.json()


@click.group()
def balancer() -> None:
    """The controller's continuous balancer: status, pause, resume."""


def _moves(moves: list[dict[str, Any]]) -> None:
    for m in moves:
        adding = f" adding {m['adding']}" if m.get("adding") else ""
        click.echo(f"  {m['topic']}-{m['partition']} -> {m['replicas']} ({m['goal']}){adding}")


def _ago(ms: int | None) -> str:
    if ms is None:
        return "never"
    return f"{max(0.0, time.time() - ms / 1000):.0f}s ago"


@balancer.command("status")
@cluster_options
@click.option("--json", "as_json", is_flag=True, help="print the REST answer")
def status(bootstrap: str | None, rest: str | None, data_dir: str, as_json: bool) -> None:
    """Enabled, paused, last check, moves in flight and the last plan."""
    got = _call("GET", f"{_url(bootstrap, rest, data_dir)}/v1/balancer")
    if as_json:
        click.echo(json.dumps(got, indent=2))
        return
    state = "disabled (balancer.enable=false)" if not got["enabled"] else "paused" if got["paused"] else "running"
    click.echo(f"Balancer: {state}")
    click.echo(f"Last check: {_ago(got.get('last_check_ms'))}")
    if got["last_triggers"]:
        click.echo("Out of balance: " + "; ".join(got["last_triggers"]))
        if got.get("idle_reason"):
            click.echo(f"No new move: {got['idle_reason']}")
    else:
        click.echo("Balanced.")
    if got.get("last_error"):
        click.echo(f"Last error: {got['last_error']}")
    if got["decommissioning"]:
        click.echo(f"Decommissioning brokers: {got['decommissioning']}")
    click.echo(f"Moves in flight: {len(got['moves_in_flight'])} (started {got['moves_started']}, "
               f"completed {got['moves_completed']} since this controller became active)")
    _moves(got["moves_in_flight"])
    if got["last_plan"]:
        click.echo(f"Last plan ({_ago(got.get('last_plan_ms'))}): {len(got['last_plan'])} moves")
        _moves(got["last_plan"])


@balancer.command("pause")
@cluster_options
def pause(bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Start no new move (moves in flight complete)."""
    _call("POST", f"{_url(bootstrap, rest, data_dir)}/v1/balancer/pause")
    click.echo("Balancer paused: no new move starts; moves in flight complete.")


@balancer.command("resume")
@cluster_options
def resume(bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Let the balancer plan and move again."""
    _call("POST", f"{_url(bootstrap, rest, data_dir)}/v1/balancer/resume")
    click.echo("Balancer resumed.")
