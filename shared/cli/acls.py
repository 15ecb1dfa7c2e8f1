"""``tidelog acls add|remove|list``, with ``kafka-acls.sh``'s options, through the REST API (``/v1/acls``)::

    tidelog acls add --allow-principal User:alice --operation Read --operation Describe --topic orders
    tidelog acls add --allow-principal User:app --operation Write --topic orders- --resource-pattern-type prefixed
    tidelog acls add --deny-principal User:mallory --deny-host 10.0.0.7 --operation All --cluster
    tidelog acls list --topic orders --resource-pattern-type match
    tidelog acls remove --allow-principal User:alice --topic orders --force

As kafka-acls: every (resource x principal x host x operation) combination is one binding; ``--allow-host`` /
``--deny-host`` default to ``*``; ``--operation`` defaults to ``All`` when adding; ``--producer`` and
``--consumer`` add the usual sets (producer: WRITE, DESCRIBE, CREATE on the topics, plus WRITE and DESCRIBE on
``--transactional-id``s and IDEMPOTENT_WRITE on the cluster with ``--idempotent``; consumer: READ, DESCRIBE on
the topics and READ on the ``--group``s). ``remove`` without principals removes every binding of the named
resources (asking first, unless ``--force``); with principals, the bindings of those principals, where an
absent ``--operation`` or host means any (kafka-acls would remove only ``All`` bindings from host ``*``).
``--resource-pattern-type`` is literal (the default) or prefixed when adding, and also any or match when
listing or removing. Bad flags exit with status 2.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import click

from shared.cli.connect import client_settings, cluster_options, resolve
from shared.client.admin import Admin
from shared.errors import TidelogError
from shared.security.acl import CLUSTER_NAME, AclOperation

#: The operations kafka-acls accepts per resource type (its ``AclCommand.validateOperation``).
OPERATIONS_BY_TYPE: dict[str, frozenset[str]] = {
    "TOPIC": frozenset({"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                        "ALL"}),
    "GROUP": frozenset({"READ", "DESCRIBE", "DELETE", "ALL"}),
    "CLUSTER": frozenset({"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
                          "ALTER", "DESCRIBE", "ALL"}),
    "TRANSACTIONAL_ID": frozenset({"DESCRIBE", "WRITE", "ALL"}),
}
_OPERATIONS = {re.sub(r"[_-]", "", op.name): op.name for op in AclOperation
               if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
_PATTERN_TYPES = ("literal", "prefixed", "match", "any")
#: (principal, host, permission) of an ACL entry or entry filter; None = any (filters only)
Entry = tuple[str | None, str | None, str | None]


def operation_name(text: str) -> str:
    """kafka-acls' spellings (``Read``, ``IdempotentWrite``, ``DESCRIBE_CONFIGS``, ``alter-configs``) -> Kafka's
    enum name; exit 2 naming the valid ones otherwise."""
    name = _OPERATIONS.get(re.sub(r"[_-]", "", text).upper())
    if name is None:
        valid = ", ".join(sorted(_OPERATIONS.values()))
        raise click.BadParameter(f"unknown operation {text!r} (valid: {valid})", param_hint="--operation")
    return name


def check_principal(text: str, flag: str) -> str:
    kind, sep, name = text.partition(":")
    if kind != "User" or not sep or not name:
        raise click.BadParameter(f"expected User:<name> (or User:* for everyone), got {text!r}", param_hint=flag)
    return text


@dataclass(frozen=True)
class Resource:
    type: str  # TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID
    name: str

    def label(self, pattern_type: str) -> str:
        return f"ResourcePattern(resourceType={self.type}, name={self.name}, patternType={pattern_type})"


def resources(topics: Iterable[str], groups: Iterable[str], txn_ids: Iterable[str], cluster: bool) -> list[Resource]:
    out = [Resource("TOPIC", t) for t in topics] + [Resource("GROUP", g) for g in groups]
    out += [Resource("TRANSACTIONAL_ID", t) for t in txn_ids]
    if cluster:
        out.append(Resource("CLUSTER", CLUSTER_NAME))
    for r in out:
        if not r.name:
            raise click.BadParameter("a resource name must not be empty", param_hint=f"--{r.type.lower()}")
    return out


def _entry_line(b: dict[str, Any]) -> str:
    return (f"\t(principal={b['principal']}, host={b['host']}, operation={b['operation']}, "
            f"permissionType={b['permission_type']})")


def print_by_resource(bindings: list[dict[str, Any]], heading: str) -> None:
    """kafka-acls' listing: one heading per resource pattern, one line per entry."""
    by: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for b in bindings:
        by.setdefault((b["resource_type"], b["resource_name"], b["pattern_type"]), []).append(b)
    for (rtype, name, ptype), entries in by.items():
        click.echo(f"{heading} `{Resource(rtype, name).label(ptype)}`:")
        for b in entries:
            click.echo(" " + _entry_line(b))
        click.echo()


def admin_client(bootstrap: str | None, rest: str | None, data_dir: str) -> Admin:
    b, r = resolve(bootstrap, rest, data_dir)
    try:
        return Admin(b, rest_url=r, **client_settings())
    except TidelogError as exc:
        raise click.ClickException(str(exc)) from None


def call(admin: Admin, method: str, path: str, **kw: Any) -> Any:
    """One REST call through the admin client's helper (its retries, credentials and error mapping)."""
    try:
        return admin._call(method, path, **kw)  # noqa: SLF001 - Admin has no ACL/user methods yet
    except TidelogError as exc:
        raise click.ClickException(str(exc)) from None


# -- the options ---------------------------------------------------------------------------------------------

def _resource_options(f: Any) -> Any:
    f = click.option("--cluster", is_flag=True, help="the cluster resource (kafka-cluster)")(f)
    f = click.option("--transactional-id", "txn_ids", multiple=True, metavar="ID",
                     help="transactional id (repeatable; '*' for all)")(f)
    f = click.option("--group", "groups", multiple=True, metavar="GROUP", help="consumer group (repeatable; '*' for all)")(f)
    f = click.option("--topic", "topics", multiple=True, metavar="TOPIC", help="topic (repeatable; '*' for all)")(f)
    return f


def _entry_options(f: Any) -> Any:
    f = click.option("--operation", "operations", multiple=True, metavar="OP",
                     help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                          "AlterConfigs, IdempotentWrite, All (repeatable)")(f)
    f = click.option("--deny-host", "deny_hosts", multiple=True, metavar="IP", help="host the deny applies to (repeatable)")(f)
    f = click.option("--allow-host", "allow_hosts", multiple=True, metavar="IP", help="host the allow applies to (repeatable)")(f)
    f = click.option("--deny-principal", "deny_principals", multiple=True, metavar="User:NAME",
                     help="principal to deny (repeatable)")(f)
    f = click.option("--allow-principal", "allow_principals", multiple=True, metavar="User:NAME",
                     help="principal to allow (repeatable)")(f)
    return f


_pattern_option = click.option("--resource-pattern-type", "pattern_type", default="literal", show_default=True,
                               type=click.Choice(_PATTERN_TYPES, case_sensitive=False),
                               help="literal or prefixed (add); also any or match (list, remove)")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def acls() -> None:
    """Add, remove and list ACLs (Kafka's model and kafka-acls.sh's options)."""


def _entries(allow_principals: tuple[str, ...], deny_principals: tuple[str, ...], allow_hosts: tuple[str, ...],
             deny_hosts: tuple[str, ...], *, default_host: str | None) -> list[Entry]:
    """``(principal, host, permission)`` for every principal x host; hosts default to ``default_host``."""
    if allow_hosts and not allow_principals:
        raise click.UsageError("--allow-host needs --allow-principal")
    if deny_hosts and not deny_principals:
        raise click.UsageError("--deny-host needs --deny-principal")
    out: list[Entry] = []
    for principals, hosts, permission, flag in ((allow_principals, allow_hosts, "ALLOW", "--allow-principal"),
                                                (deny_principals, deny_hosts, "DENY", "--deny-principal")):
        for p in principals:
            check_principal(p, flag)
            out += [(p, h, permission) for h in (hosts or (default_host,))]
    return out


def _producer_consumer(res: list[Resource], producer: bool, consumer: bool, idempotent: bool,
                       ) -> list[tuple[Resource, list[str]]]:
    """kafka-acls' --producer / --consumer: the operations per resource they stand for."""
    topics = [r for r in res if r.type == "TOPIC"]
    if not topics:
        raise click.UsageError("--producer and --consumer need --topic")
    out: list[tuple[Resource, list[str]]] = []
    if producer:
        out += [(t, ["WRITE", "DESCRIBE", "CREATE"]) for t in topics]
        out += [(r, ["WRITE", "DESCRIBE"]) for r in res if r.type == "TRANSACTIONAL_ID"]
        if idempotent:
            out.append((Resource("CLUSTER", CLUSTER_NAME), ["IDEMPOTENT_WRITE"]))
    if consumer:
        groups = [r for r in res if r.type == "GROUP"]
        if not groups:
            raise click.UsageError("--consumer needs --group")
        out += [(t, ["READ", "DESCRIBE"]) for t in topics] + [(g, ["READ"]) for g in groups]
    return out


@acls.command()
@_resource_options
@_entry_options
@_pattern_option
@click.option("--producer", is_flag=True, help="the ACLs a producer needs on the --topic(s) (and --transactional-id)")
@click.option("--consumer", is_flag=True, help="the ACLs a consumer needs on the --topic(s) and --group(s)")
@click.option("--idempotent", is_flag=True, help="with --producer: IDEMPOTENT_WRITE on the cluster too")
@cluster_options
def add(topics: tuple[str, ...], groups: tuple[str, ...], txn_ids: tuple[str, ...], cluster: bool,
        allow_principals: tuple[str, ...], deny_principals: tuple[str, ...], allow_hosts: tuple[str, ...],
        deny_hosts: tuple[str, ...], operations: tuple[str, ...], pattern_type: str, producer: bool, consumer: bool,
        idempotent: bool, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Add ACLs: each principal x host x operation on each resource."""
    pattern = pattern_type.upper()
    if pattern not in ("LITERAL", "PREFIXED"):
        raise click.BadParameter(f"{pattern_type!r} is not valid when adding ACLs (use literal or prefixed)",
                                 param_hint="--resource-pattern-type")
    res = resources(topics, groups, txn_ids, cluster)
    if not res:
        raise click.UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    entries = _entries(allow_principals, deny_principals, allow_hosts, deny_hosts, default_host="*")
    if not entries:
        raise click.UsageError("give --allow-principal and/or --deny-principal")
    if idempotent and not producer:
        raise click.UsageError("--idempotent goes with --producer")
    if producer or consumer:
        if operations:
            raise click.UsageError("--producer / --consumer choose the operations: drop --operation")
        plan = _producer_consumer(res, producer, consumer, idempotent)
    else:
        ops = [operation_name(o) for o in operations] or ["ALL"]
        for r in res:
            bad = [o for o in ops if o not in OPERATIONS_BY_TYPE[r.type]]
            if bad:
                raise click.BadParameter(f"resource type {r.type} supports only "
                                         f"{', '.join(sorted(OPERATIONS_BY_TYPE[r.type]))}; not {', '.join(bad)}",
                                         param_hint="--operation")
        plan = [(r, ops) for r in res]
    bindings = [{"resource_type": r.type, "resource_name": r.name,
                 "pattern_type": "LITERAL" if r.type == "CLUSTER" else pattern,
                 "principal": p, "host": h, "operation": op, "permission_type": perm}
                for r, ops in plan for p, h, perm in entries for op in ops]
    with admin_client(bootstrap, rest, data_dir) as admin:
        result = call(admin, "POST", "/v1/acls", json={"acls": bindings})
    print_by_resource(bindings, "Adding ACLs for resource")
    click.echo(f"Added {len(result['created'])} ACL binding(s)"
               + (f"; {len(result['existing'])} already existed." if result["existing"] else "."))


def _filters(res: list[Resource], pattern: str, entries: list[Entry], operations: list[str] | None,
             ) -> list[dict[str, str]]:
    """The REST filters (query parameters) for each resource x entry x operation (absent: any)."""
    out = []
    for r in res or [None]:
        base: dict[str, str] = {"pattern_type": pattern}
        if r is not None:
            base |= {"resource_type": r.type, "resource_name": r.name}
        for principal, host, permission in entries or [(None, None, None)]:
            for op in operations or [None]:
                f = dict(base)
                for key, value in (("principal", principal), ("host", host), ("permission", permission),
                                   ("operation", op)):
                    if value is not None:
                        f[key] = value
                out.append(f)
    return out


@acls.command()
@_resource_options
@_entry_options
@_pattern_option
@click.option("--force", is_flag=True, help="do not ask for confirmation")
@cluster_options
def remove(topics: tuple[str, ...], groups: tuple[str, ...], txn_ids: tuple[str, ...], cluster: bool,
           allow_principals: tuple[str, ...], deny_principals: tuple[str, ...], allow_hosts: tuple[str, ...],
           deny_hosts: tuple[str, ...], operations: tuple[str, ...], pattern_type: str, force: bool,
           bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Remove ACLs of the named resources (all of them, or those of the given principals)."""
    res = resources(topics, groups, txn_ids, cluster)
    if not res:
        raise click.UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    entries = _entries(allow_principals, deny_principals, allow_hosts, deny_hosts, default_host=None)
    ops = [operation_name(o) for o in operations]
    filters = _filters(res, pattern_type.upper(), entries, ops)
    if not force:
        what = "the ACLs of the given principals" if entries else "all ACLs"
        names = ", ".join(r.label(pattern_type.upper()) for r in res)
        if not click.confirm(f"Are you sure you want to remove {what} for {names}?", default=False):
            raise click.Abort()
    removed: list[dict[str, Any]] = []
    with admin_client(bootstrap, rest, data_dir) as admin:
        for f in filters:
            removed += call(admin, "DELETE", "/v1/acls", params=f)["acls"]
    print_by_resource(removed, "Removed ACLs for resource")
    click.echo(f"Removed {len(removed)} ACL binding(s).")


@acls.command(name="list")
@_resource_options
@_pattern_option
@click.option("--principal", "principals", multiple=True, metavar="User:NAME", help="only this principal's (repeatable)")
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def list_(topics: tuple[str, ...], groups: tuple[str, ...], txn_ids: tuple[str, ...], cluster: bool,
          pattern_type: str, principals: tuple[str, ...], as_json: bool, bootstrap: str | None, rest: str | None,
          data_dir: str) -> None:
    """List ACLs: all, or those of the named resources (and principals)."""
    res = resources(topics, groups, txn_ids, cluster)
    entries: list[Entry] = [(check_principal(p, "--principal"), None, None) for p in principals]
    # without a resource, kafka-acls lists everything whatever the pattern type
    filters = _filters(res, pattern_type.upper() if res else "ANY", entries, None)
    found: dict[str, dict[str, Any]] = {}
    with admin_client(bootstrap, rest, data_dir) as admin:
        for f in filters:
            for b in call(admin, "GET", "/v1/acls", params=f)["acls"]:
                found[json.dumps(b, sort_keys=True)] = b
    bindings = list(found.values())
    if as_json:
        click.echo(json.dumps({"acls": bindings}, indent=2))
    elif not bindings:
        click.echo("No ACLs found.")
    else:
        print_by_resource(bindings, "Current ACLs for resource")
