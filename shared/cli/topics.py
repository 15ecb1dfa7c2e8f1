"""``tidelog topics create|list|describe|delete|alter`` (through the REST admin API)."""

from __future__ import annotations

import json
from typing import Any

import click
import httpx
from rich.table import Table

from shared.cli.connect import client_settings, cluster_options, resolve
from shared.cli.console import out_console
from shared.cli.wording import plural
from shared.client.admin import Admin
from shared.errors import TidelogError


def _admin(bootstrap: str | None, rest: str | None, data_dir: str) -> Admin:
    b, r = resolve(bootstrap, rest, data_dir)
    try:
        return Admin(b, rest_url=r, **client_settings())
    except TidelogError as exc:
        raise click.ClickException(str(exc)) from None


def _parse_configs(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint="--config")
        out[key.strip()] = value.strip()
    return out


def _call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except TidelogError as exc:
        raise click.ClickException(str(exc)) from None
    except httpx.HTTPError as exc:
        try:
            where = f" at {exc.request.url}"
        except RuntimeError:  # no request attached
            where = ""
        raise click.ClickException(f"cannot reach the REST admin API{where}: {exc}") from None


def _print_topic(t: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(t, indent=2))
        return
    click.echo(f"Topic: {t['name']}  TopicId: {t['topic_id']}  PartitionCount: {len(t['partitions'])}  "
               f"ReplicationFactor: {t['replication_factor']}  Configs: "
               + ",".join(f"{k}={v}" for k, v in sorted(t["config_overrides"].items())))
    table = Table(show_edge=False, box=None)
    for col in ("Partition", "Leader", "LeaderEpoch", "Replicas", "Isr"):
        table.add_column(col)
    for p in t["partitions"]:
        table.add_row(str(p["partition"]), str(p["leader"]), str(p["leader_epoch"]),
                      ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])))
    out_console().print(table)


@click.group()
def topics() -> None:
    """Create, list, describe, delete and alter topics."""


@topics.command("create")
@click.argument("name")
@click.option("--partitions", default=1, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--replication-factor", default=1, show_default=True, type=click.IntRange(1, 32))
@click.option("--config", "configs", multiple=True, help="topic config key=value (repeatable)")
@cluster_options
def create(name: str, partitions: int, replication_factor: int, configs: tuple[str, ...],
           bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Create topic NAME."""
    admin = _admin(bootstrap, rest, data_dir)
    t = _call(admin.create_topic, name, partitions, replication_factor, _parse_configs(configs))
    click.echo(f"Created topic {t['name']} ({plural(len(t['partitions']), 'partition')}, "
               f"replication factor {t['replication_factor']}).")


@topics.command("list")
@cluster_options
def list_(bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """List topic names."""
    for name in _call(_admin(bootstrap, rest, data_dir).list_topics):
        click.echo(name)


@topics.command("describe")
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def describe(names: tuple[str, ...], as_json: bool, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Partitions, leaders, replicas, ISR and configs of topics (all if none named)."""
    admin = _admin(bootstrap, rest, data_dir)
    for name in names or _call(admin.list_topics):
        _print_topic(_call(admin.describe_topic, name), as_json)


@topics.command("delete")
@click.argument("name")
@cluster_options
def delete(name: str, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Delete topic NAME and its data."""
    _call(_admin(bootstrap, rest, data_dir).delete_topic, name)
    click.echo(f"Deleted topic {name}.")


@topics.command("alter")
@click.argument("name")
@click.option("--config", "configs", multiple=True, help="set key=value (repeatable)")
@click.option("--delete-config", "deletes", multiple=True, help="remove an override (repeatable)")
@click.option("--partitions", type=click.IntRange(1, 10_000), default=None, help="grow to this many partitions")
@click.option("--replication-factor", type=click.IntRange(1, 64), default=None,
              help="raise or lower the replication factor (through a reassignment; waits until done)")
@cluster_options
def alter(name: str, configs: tuple[str, ...], deletes: tuple[str, ...], partitions: int | None,
          replication_factor: int | None, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Change configs, grow the partition count or change the replication factor of topic NAME."""
    admin = _admin(bootstrap, rest, data_dir)
    if not configs and not deletes and partitions is None and replication_factor is None:
        raise click.UsageError("nothing to change: give --config, --delete-config, --partitions or "
                               "--replication-factor")
    changes: dict[str, Any] = dict(_parse_configs(configs))
    changes.update({k: None for k in deletes})
    if changes:
        _call(admin.alter_configs, name, changes)
    if partitions is not None:
        _call(admin.create_partitions, name, partitions)
    if replication_factor is not None:
        from shared.cli.reassign import change_replication_factor  # imports this module

        change_replication_factor(admin, name, replication_factor)
    click.echo(f"Altered topic {name}.")
