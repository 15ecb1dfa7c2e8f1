"""``tidelog quotas describe|alter|effective``, like ``kafka-configs.sh`` for client quotas (through REST).

Entities are named as kafka-configs does, in order: each ``--entity-type``
(``users`` or ``clients``) is followed by ``--entity-name N`` or
``--entity-default``::

    tidelog quotas alter --entity-type clients --entity-name app --add producer_byte_rate=1048576
    tidelog quotas alter --entity-type users --entity-default --entity-type clients --entity-name app \\
        --delete request_percentage
    tidelog quotas describe --entity-type clients
"""

from __future__ import annotations

import json
from typing import Any

import click

from shared.cli.connect import client_settings, cluster_options, resolve
from shared.client.admin import Admin
from shared.errors import TidelogError

DEFAULT = "<default>"
_TYPES = {"users": "user", "clients": "client-id"}
_EXTRA = {"ignore_unknown_options": True, "allow_extra_args": True}


def parse_entity(args: list[str]) -> tuple[dict[str, str | None], list[str]]:
    """The entity named by ``--entity-type``/``--entity-name``/``--entity-default`` in ``args`` (in order),
    as ``{"user"|"client-id": name or DEFAULT or None (type given, no name: any)}``, and the other args."""
    entity: dict[str, str | None] = {}
    rest: list[str] = []
    current: str | None = None
    i = 0
    while i < len(args):
        arg, value = args[i], args[i + 1] if i + 1 < len(args) else None
        if arg == "--entity-type":
            if value not in _TYPES:
                raise click.BadParameter(f"expected users or clients, got {value!r}", param_hint="--entity-type")
            current = _TYPES[value]
            if current in entity:
                raise click.BadParameter(f"{value} given twice", param_hint="--entity-type")
            entity[current] = None
            i += 2
        elif arg in ("--entity-name", "--entity-default"):
            if current is None or entity[current] is not None:
                raise click.BadParameter(f"{arg} must follow an --entity-type", param_hint=arg)
            if arg == "--entity-name":
                if not value:
                    raise click.BadParameter("needs a name", param_hint=arg)
                entity[current] = value
                i += 2
            else:
                entity[current] = DEFAULT
                i += 1
        else:
            rest.append(arg)
            i += 1
    return entity, rest


def _admin(bootstrap: str | None, rest: str | None, data_dir: str) -> Admin:
    b, r = resolve(bootstrap, rest, data_dir)
    try:
        return Admin(b, rest_url=r, **client_settings())
    except TidelogError as exc:
        raise click.ClickException(str(exc)) from None


def _entity_label(entity: dict[str, Any]) -> str:
    parts = []
    for kind, label in (("user", "user-principal"), ("client-id", "client-id")):
        if kind in entity:
            parts.append(f"{label} {'<default>' if entity[kind] is None else repr(entity[kind])}")
    return ", ".join(parts)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def quotas() -> None:
    """Describe and alter client quotas (producer_byte_rate, consumer_byte_rate, request_percentage, cluster_wide)."""


@quotas.command(context_settings=_EXTRA)
@click.option("--json", "as_json", is_flag=True)
@cluster_options
@click.pass_context
def describe(ctx: click.Context, as_json: bool, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Quota entries: all, or those of [--entity-type users|clients (--entity-name N|--entity-default)]..."""
    entity, extra = parse_entity(ctx.args)
    if extra:
        raise click.UsageError(f"unexpected arguments: {' '.join(extra)}")
    with _admin(bootstrap, rest, data_dir) as admin:
        try:
            entries = admin.describe_client_quotas(entity.get("user"), entity.get("client-id"))
        except TidelogError as exc:
            raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    if not entries:
        click.echo("No quota configs found.")
    for e in entries:
        values = ", ".join(f"{k}={v:.10g}" for k, v in sorted(e["values"].items()))
        click.echo(f"Quota configs for {_entity_label(e['entity'])} are {values}")


def _ops(add: str | None, delete: str | None) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    for item in (add or "").split(","):
        if item.strip():
            key, sep, value = item.partition("=")
            try:
                ops.append({"key": key.strip(), "value": float(value)})
            except ValueError:
                raise click.BadParameter(f"expected key=number, got {item!r}", param_hint="--add") from None
            if not sep:
                raise click.BadParameter(f"expected key=number, got {item!r}", param_hint="--add")
    ops += [{"key": k.strip(), "remove": True} for k in (delete or "").split(",") if k.strip()]
    if not ops:
        raise click.UsageError("give --add key=value[,key=value] and/or --delete key[,key]")
    return ops


@quotas.command(context_settings=_EXTRA)
@click.option("--add", default=None, help="key=value[,key=value...] to set")
@click.option("--delete", default=None, help="key[,key...] to remove")
@click.option("--validate-only", is_flag=True, help="check the change without applying it")
@cluster_options
@click.pass_context
def alter(ctx: click.Context, add: str | None, delete: str | None, validate_only: bool,
          bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Set/remove quota keys of one entity: --entity-type users|clients (--entity-name N|--entity-default)..."""
    entity, extra = parse_entity(ctx.args)
    if extra:
        raise click.UsageError(f"unexpected arguments: {' '.join(extra)}")
    if not entity or any(v is None for v in entity.values()):
        raise click.UsageError("name the entity: --entity-type users|clients then --entity-name N or --entity-default")
    wire = {k: (None if v == DEFAULT else v) for k, v in entity.items()}
    with _admin(bootstrap, rest, data_dir) as admin:
        try:
            (result,) = admin.alter_client_quotas([{"entity": wire, "ops": _ops(add, delete)}], validate_only)
        except TidelogError as exc:
            raise click.ClickException(str(exc)) from None
    values = ", ".join(f"{k}={v:.10g}" for k, v in sorted(result["values"].items())) or "no keys left"
    verb = "Validated" if validate_only else "Completed updating"
    click.echo(f"{verb} quota configs for {_entity_label(result['entity'])}: {values}")


@quotas.command()
@click.option("--user", default="ANONYMOUS", show_default=True)
@click.option("--client-id", default="", help="the client id the client sends")
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def effective(user: str, client_id: str, as_json: bool, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Which quota entry applies to a user and client id (Kafka's precedence), and why."""
    with _admin(bootstrap, rest, data_dir) as admin:
        try:
            found = admin.effective_client_quotas(user, client_id)
        except TidelogError as exc:
            raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    for key, m in found["quotas"].items():
        if m is None:
            click.echo(f"{key}: unlimited (no entry applies)")
        else:
            scope = "cluster-wide" if m["cluster_wide"] else "per broker"
            click.echo(f"{key}={m['value']:.10g} from {_entity_label(m['entity'])} "
                       f"(level {m['level']}: {m['level_name']}; {scope})")
