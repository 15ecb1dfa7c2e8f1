"""``tidelog groups list|describe|delete|reset-offsets`` (through the REST admin API), as
``kafka-consumer-groups.sh``."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from shared.cli.connect import cluster_options
from shared.cli.console import out_console
from shared.cli.topics import _admin
from shared.errors import TidelogError


def _rest(bootstrap: str | None, rest: str | None, data_dir: str, method: str, path: str, **kw: Any) -> Any:
    admin = _admin(bootstrap, rest, data_dir)
    try:
        return admin._call(method, path, **kw)
    except TidelogError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        admin.close()


def _table(columns: list[str], rows: list[list[Any]]) -> None:
    table = Table(show_edge=False, box=None)
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row))
    out_console().print(table)


@click.group()
def groups() -> None:
    """List, describe, delete consumer groups and reset their offsets."""


@groups.command("list")
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def list_groups(as_json: bool, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Every group the coordinators know."""
    out = _rest(bootstrap, rest, data_dir, "GET", "/v1/groups")["groups"]
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    _table(["GROUP", "TYPE", "STATE", "MEMBERS"],
           [[g["group_id"], g.get("group_type", "consumer"), g["state"], g["members"]] for g in out])


@groups.command("describe")
@click.argument("group")
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def describe(group: str, as_json: bool, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Members, committed offsets, log end offsets and lag of GROUP."""
    g = _rest(bootstrap, rest, data_dir, "GET", f"/v1/groups/{group}")
    if as_json:
        click.echo(json.dumps(g, indent=2))
        return
    if g.get("group_type") == "classic":
        click.echo(f"Group: {g['group_id']}  Type: classic  State: {g['state']}  Generation: {g['group_epoch']}  "
                   f"ProtocolType: {g.get('protocol_type') or '-'}  Protocol: {g['assignor'] or '-'}")
    else:
        click.echo(f"Group: {g['group_id']}  State: {g['state']}  GroupEpoch: {g['group_epoch']}  "
                   f"AssignmentEpoch: {g['assignment_epoch']}  Assignor: {g['assignor']}")
    _table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER-ID"],
           [[p["topic"], p["partition"], p["committed_offset"], p["log_end_offset"], p["lag"], p["member_id"]]
            for p in g["partitions"]])
    _table(["MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "EPOCH", "PARTITIONS"],
           [[m["member_id"], m["instance_id"], m["client_id"], m["host"], m["member_epoch"], ",".join(m["partitions"])]
            for m in g["members"]])


@groups.command("delete")
@click.argument("group")
@cluster_options
def delete(group: str, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Delete GROUP and its offsets (it must have no members)."""
    _rest(bootstrap, rest, data_dir, "DELETE", f"/v1/groups/{group}")
    click.echo(f"Deleted group {group}")


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", required=True, help="TOPIC or TOPIC:P1,P2")
@click.option("--to-earliest", "to", flag_value="earliest")
@click.option("--to-latest", "to", flag_value="latest")
@click.option("--to-datetime", "timestamp", type=click.IntRange(0), default=None, help="a timestamp in ms")
@click.option("--to-offset", "offset", type=click.IntRange(0), default=None)
@click.option("--shift-by", "shift", type=int, default=None)
@click.option("--execute", is_flag=True, help="commit the new offsets (default: show them only)")
@cluster_options
def reset_offsets(group: str, topic: str, to: str | None, timestamp: int | None, offset: int | None, shift: int | None,
                  execute: bool, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Move GROUP's committed offsets (the group must have no members); a dry run unless --execute."""
    choices = [(k, v) for k, v in (("earliest", None), ("latest", None)) if to == k]
    choices += [(k, v) for k, v in (("timestamp", timestamp), ("offset", offset), ("shift-by", shift)) if v is not None]
    if len(choices) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset, --shift-by")
    name, _, parts = topic.partition(":")
    try:
        partitions = [int(p) for p in parts.split(",")] if parts else None
    except ValueError:
        raise click.BadParameter(f"expected TOPIC or TOPIC:P1,P2, got {topic!r}", param_hint="--topic") from None
    kind, value = choices[0]
    body = {"topic": name, "partitions": partitions, "to": kind, "value": value, "execute": execute}
    out = _rest(bootstrap, rest, data_dir, "POST", f"/v1/groups/{group}/offsets/reset", json=body)
    _table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
           [[p["topic"], p["partition"], p["current_offset"], p["new_offset"]] for p in out["partitions"]])
    if not execute:
        click.echo("Dry run: nothing changed (add --execute)", err=True)
