"""Who may call each REST route when security is on (issue 23): one table, checked by the app-wide
dependency (``deps.request_context``) before any route runs, with Kafka's operations for the same
admin requests. A route missing from the table is refused (403 CLUSTER_AUTHORIZATION_FAILED) when
security is on, and the unit tests fail: a route added later cannot go unguarded.

A rule is a list of ``Need`` (all must hold; a ``Need`` with several operations holds when any of them
is allowed; a topic's CREATE also holds with CREATE on the cluster, as Kafka's CreateTopics). A ``Need``
whose name the request lacks (a body or query that will not validate) holds only if the principal may do
the operation on *some* resource of the type (Kafka's ``authorizeByResourceType``), so a principal without
rights is answered 403, not 400. List routes (``listed``: topics, groups, transactions, ``/v1/cluster``)
need some right on their resource type (any of DESCRIBE, READ, WRITE, CREATE, DELETE, ALTER; the cluster
view: on any type, or CLUSTER DESCRIBE) and their API then shows only what the principal may describe
(``/v1/cluster`` without broker incarnations unless CLUSTER DESCRIBE). A refusal is 403 with Kafka's name (``TOPIC_AUTHORIZATION_FAILED``,
``GROUP_AUTHORIZATION_FAILED``, ``CLUSTER_AUTHORIZATION_FAILED``, ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``),
audited; a write (``change``) that succeeds is audited as an ``admin_change``.

Operations, as Kafka: topics CREATE / DESCRIBE / DELETE / ALTER_CONFIGS / ALTER (partitions); groups
DESCRIBE / DELETE / READ (offset reset, with READ on the topic); transactions DESCRIBE, a partition's
producers TOPIC READ; quotas and broker configs CLUSTER ALTER or ALTER_CONFIGS to change, DESCRIBE or
DESCRIBE_CONFIGS to read; leader elections, reassignments, the balancer and aborting a transaction
CLUSTER ALTER; everything read about the cluster (log dirs, cleaner, reassignments, plans, balancer
status, hanging transactions) CLUSTER DESCRIBE; ACLs and users (``/v1/acls``, ``/v1/users``) CLUSTER
DESCRIBE to read and ALTER to change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from services.controller.authz import Op, Res
from shared.security.acl import CLUSTER_NAME, AclOperation, ResourceType

#: how a Need finds its resource name: (request, parsed JSON body or None) -> name (None: not there)
NameOf = Callable[[Request, Any], "str | None"]


@dataclass(frozen=True)
class Need:
    ops: tuple[AclOperation, ...]
    rtype: ResourceType
    name: NameOf
    uses_body: bool = False
    or_cluster: bool = False  # the first operation on the CLUSTER also grants it (Kafka's CreateTopics)


def cluster(request: Request, body: Any) -> str:
    return CLUSTER_NAME


def path(param: str) -> NameOf:
    def name(request: Request, body: Any) -> str | None:
        value = request.path_params.get(param)
        return None if value is None else str(value)
    return name


def query(param: str) -> NameOf:
    def name(request: Request, body: Any) -> str | None:
        return request.query_params.get(param)
    return name


def field(key: str) -> NameOf:
    def name(request: Request, body: Any) -> str | None:
        value = body.get(key) if isinstance(body, dict) else None
        return value if isinstance(value, str) else None
    return name


def need(ops: AclOperation | tuple[AclOperation, ...], rtype: ResourceType, name: NameOf = cluster,
         uses_body: bool = False, or_cluster: bool = False) -> Need:
    return Need(ops if isinstance(ops, tuple) else (ops,), rtype, name, uses_body, or_cluster)


@dataclass(frozen=True)
class Rule:
    needs: tuple[Need, ...]
    change: bool = False  # a write: audited as an admin change when it succeeds
    listed: tuple[ResourceType, ...] = ()  # a list route: some right on one of these types (see above)


def listed(*types: ResourceType) -> Rule:
    return Rule((), listed=types)


LISTED = listed  # (a rule factory: ``LISTED(Res.TOPIC)``)

READ_CLUSTER = Rule((need(Op.DESCRIBE, Res.CLUSTER),))
ALTER_CLUSTER = Rule((need(Op.ALTER, Res.CLUSTER),), change=True)
READ_CONFIGS = Rule((need((Op.DESCRIBE_CONFIGS, Op.DESCRIBE), Res.CLUSTER),))
ALTER_CONFIGS = Rule((need((Op.ALTER_CONFIGS, Op.ALTER), Res.CLUSTER),), change=True)

#: (method, route path as the OpenAPI document spells it) -> rule
RULES: dict[tuple[str, str], Rule] = {
    ("GET", "/v1/cluster"): listed(Res.TOPIC, Res.GROUP, Res.TRANSACTIONAL_ID, Res.CLUSTER),
    # topics
    ("GET", "/v1/topics"): listed(Res.TOPIC),
    ("POST", "/v1/topics"): Rule((need(Op.CREATE, Res.TOPIC, field("name"), uses_body=True, or_cluster=True),),
                                 change=True),
    ("GET", "/v1/topics/{name}"): Rule((need(Op.DESCRIBE, Res.TOPIC, path("name")),)),
    ("DELETE", "/v1/topics/{name}"): Rule((need(Op.DELETE, Res.TOPIC, path("name")),), change=True),
    ("PATCH", "/v1/topics/{name}/configs"): Rule((need(Op.ALTER_CONFIGS, Res.TOPIC, path("name")),), change=True),
    ("POST", "/v1/topics/{name}/partitions"): Rule((need(Op.ALTER, Res.TOPIC, path("name")),), change=True),
    ("POST", "/v1/elect-leaders"): ALTER_CLUSTER,
    # groups
    ("GET", "/v1/groups"): listed(Res.GROUP),
    ("GET", "/v1/groups/{group_id}"): Rule((need(Op.DESCRIBE, Res.GROUP, path("group_id")),)),
    ("DELETE", "/v1/groups/{group_id}"): Rule((need(Op.DELETE, Res.GROUP, path("group_id")),), change=True),
    ("POST", "/v1/groups/{group_id}/offsets/reset"): Rule((
        need(Op.READ, Res.GROUP, path("group_id")),
        need(Op.READ, Res.TOPIC, field("topic"), uses_body=True)), change=True),
    # quotas
    ("GET", "/v1/quotas"): READ_CONFIGS,
    ("GET", "/v1/quotas/effective"): READ_CONFIGS,
    ("POST", "/v1/quotas/alter"): ALTER_CONFIGS,
    # brokers
    ("GET", "/v1/brokers/{broker}/configs"): READ_CONFIGS,
    ("PATCH", "/v1/brokers/{broker}/configs"): ALTER_CONFIGS,
    ("GET", "/v1/brokers/{broker}/log-dirs"): READ_CLUSTER,
    ("GET", "/v1/log-dirs"): READ_CLUSTER,
    ("GET", "/v1/cleaner"): READ_CLUSTER,
    # transactions
    ("GET", "/v1/transactions"): listed(Res.TRANSACTIONAL_ID),
    ("GET", "/v1/transactions/hanging"): READ_CLUSTER,
    ("GET", "/v1/transactions/producers"): Rule((need(Op.READ, Res.TOPIC, query("topic")),)),
    ("POST", "/v1/transactions/abort"): ALTER_CLUSTER,
    ("GET", "/v1/transactions/{transactional_id}"): Rule((
        need(Op.DESCRIBE, Res.TRANSACTIONAL_ID, path("transactional_id")),)),
    # reassignments
    ("GET", "/v1/reassignments"): READ_CLUSTER,
    ("POST", "/v1/reassignments"): ALTER_CLUSTER,
    ("DELETE", "/v1/reassignments"): ALTER_CLUSTER,
    ("POST", "/v1/reassignments/generate"): READ_CLUSTER,
    ("POST", "/v1/reassignments/decommission-plan"): READ_CLUSTER,
    ("POST", "/v1/reassignments/replication-factor-plan"): READ_CLUSTER,
    # balancer
    ("GET", "/v1/balancer"): READ_CLUSTER,
    ("POST", "/v1/balancer/pause"): ALTER_CLUSTER,
    ("POST", "/v1/balancer/resume"): ALTER_CLUSTER,
    ("POST", "/v1/balancer/decommissioning/{broker}"): ALTER_CLUSTER,
    ("DELETE", "/v1/balancer/decommissioning/{broker}"): ALTER_CLUSTER,
}

#: route prefixes whose every route follows one rule by method (the ACL and user routes: Kafka's
#: DescribeAcls / DescribeUserScramCredentials need CLUSTER DESCRIBE, the changes CLUSTER ALTER)
#: (their API modules audit each change themselves, binding by binding: not ``change`` here)
PREFIX_RULES: dict[str, tuple[Rule, Rule]] = {
    "/v1/acls": (READ_CLUSTER, Rule(ALTER_CLUSTER.needs)),
    "/v1/users": (READ_CLUSTER, Rule(ALTER_CLUSTER.needs)),
}


def rule_for(method: str, route: str) -> Rule | None:
    """The route's rule; None for a route nobody wrote one for (refused when security is on)."""
    rule = RULES.get((method, route))
    if rule is not None:
        return rule
    for prefix, (read, write) in PREFIX_RULES.items():
        if route == prefix or route.startswith(prefix + "/"):
            return read if method in ("GET", "HEAD") else write
    return None
