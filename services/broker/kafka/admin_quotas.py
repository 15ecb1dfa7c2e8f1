"""DescribeClientQuotas (48) and AlterClientQuotas (49) on the Kafka door, over the controller's
``/v1/quotas`` REST API.

Kafka's filter has per entity type a match (EXACT name, DEFAULT, or ANY name including the default)
and ``strict`` (no entity types beyond the filter's); REST's filter cannot say "any name of this type",
so every entry is read and Kafka's filter applied here (``QuotaFilter``, pure). Tidelog has user and
client-id quotas: a filter on ``ip`` matches nothing, altering an ``ip`` entity is ``INVALID_REQUEST``.
AlterClientQuotas answers each entity on its own, as Kafka does: every entity is validated here with
the quota rules of ``shared.quota.entities`` (the controller's), and only the valid ones are sent.
ACLs, as Kafka: DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster (``CLUSTER_AUTHORIZATION_FAILED``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from services.broker.kafka.admin_common import ItemError, authorize, duplicates, item_error, links
from services.broker.kafka.apis import Connection, KafkaApis, Reply
from services.broker.pipeline import RequestContext
from shared.errors import ErrorCode, TidelogError
from shared.kafka.messages import RequestFrame
from shared.quota.entities import ENTITY_TYPES, QuotaEntity, apply_ops
from shared.security.access import ALTER_CONFIGS, CLUSTER, DESCRIBE_CONFIGS

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
DESCRIBE_CLIENT_QUOTAS_VERSIONS = (0, 1)
ALTER_CLIENT_QUOTAS_VERSIONS = (0, 1)
EXACT, DEFAULT, ANY = 0, 1, 2  # DescribeClientQuotas match types
IP = "ip"
KAFKA_ENTITY_TYPES = (*ENTITY_TYPES, IP)
#: Entries per REST call (the REST API takes at most 1000 at once).
REST_BATCH = 1000


def register(apis: KafkaApis) -> None:
    apis.register(DESCRIBE_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS_VERSIONS, handle_describe_client_quotas)
    apis.register(ALTER_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS_VERSIONS, handle_alter_client_quotas)


@dataclass(frozen=True)
class QuotaFilter:
    """Kafka's ClientQuotaFilter: ``components`` maps an entity type to ``(match type, name)``."""

    components: Mapping[str, tuple[int, str | None]]
    strict: bool

    @classmethod
    def parse(cls, components: Iterable[tuple[str, int, str | None]], strict: bool) -> QuotaFilter:
        """From the request's components; ``INVALID_REQUEST`` for what Kafka refuses."""
        given = list(components)
        if dup := duplicates([t for t, _, _ in given]):
            raise ItemError(ErrorCode.INVALID_REQUEST, f"Duplicate filter component entity type: {sorted(dup)[0]}")
        out: dict[str, tuple[int, str | None]] = {}
        for entity_type, match_type, match in given:
            if entity_type not in KAFKA_ENTITY_TYPES:
                raise ItemError(ErrorCode.INVALID_REQUEST, f"Custom entity type '{entity_type}' not supported")
            if match_type not in (EXACT, DEFAULT, ANY):
                raise ItemError(ErrorCode.INVALID_REQUEST, f"Unexpected match type {match_type} for {entity_type}")
            if match_type == EXACT and match is None:
                raise ItemError(ErrorCode.INVALID_REQUEST, f"Request specified EXACT match type for {entity_type} "
                                                           "but no match")
            if match_type in (DEFAULT, ANY) and match is not None:
                raise ItemError(ErrorCode.INVALID_REQUEST, f"Request specified {'DEFAULT' if match_type == DEFAULT else 'ANY'} "
                                                           f"match type for {entity_type} with a match string")
            out[entity_type] = (match_type, match)
        return cls(out, strict)

    def matches(self, entity: Mapping[str, str | None]) -> bool:
        """``entity``: entity type -> name (None: the default entity of that type), as REST gives it."""
        for entity_type, (match_type, match) in self.components.items():
            if entity_type not in entity:
                return False
            name = entity[entity_type]
            if match_type == EXACT and name != match:
                return False
            if match_type == DEFAULT and name is not None:
                return False
        return not self.strict or set(entity) <= set(self.components)


def entity_data(entity: Mapping[str, str | None]) -> list[dict[str, str | None]]:
    return [{"entity_type": t, "entity_name": n} for t, n in sorted(entity.items())]


async def handle_describe_client_quotas(apis: KafkaApis, req: RequestFrame, ctx: RequestContext,
                                        conn: Connection) -> Reply:
    body = req.body
    try:
        authorize(apis, ctx, DESCRIBE_CONFIGS, CLUSTER)  # Kafka: DESCRIBE_CONFIGS on the cluster
        flt = QuotaFilter.parse(((c.entity_type, int(c.match_type), c.match) for c in body.components),
                                bool(body.strict))
        result = await links(apis).describe_quotas()
        if not result.ok:
            raise ItemError(result.error, result.message or result.error.name)
        entries = [{"entity": entity_data(e["entity"]),
                    "values": [{"key": k, "value": float(v)} for k, v in sorted(e["values"].items())]}
                   for e in result.body if flt.matches(e["entity"])]
        return {"error_code": 0, "error_message": None, "entries": entries}, 0
    except Exception as exc:
        err = item_error(exc, "describe client quotas")
        return {"error_code": int(err.code), "error_message": err.message, "entries": None}, 0


def rest_alteration(entity: Iterable[tuple[str, str | None]],
                    ops: Iterable[tuple[str, float, bool]]) -> dict[str, Any] | None:
    """One AlterClientQuotas entry as the REST API takes it (None: no ops, nothing to send), checked
    with the controller's rules (``INVALID_REQUEST``)."""
    parts = list(entity)
    if dup := duplicates([t for t, _ in parts]):
        raise ItemError(ErrorCode.INVALID_REQUEST, f"Duplicate entity type: {sorted(dup)[0]}")
    if any(t == IP for t, _ in parts):
        raise ItemError(ErrorCode.INVALID_REQUEST, "ip quotas are not supported by Tidelog (user and client-id are)")
    given = list(ops)
    if dup := duplicates([k for k, _, _ in given]):
        raise ItemError(ErrorCode.INVALID_REQUEST, f"Duplicate quota key: {sorted(dup)[0]}")
    as_dict = dict(parts)
    try:
        QuotaEntity.from_dict(as_dict)
        apply_ops({}, [(k, None if remove else v) for k, v, remove in given])
    except TidelogError as exc:
        raise ItemError(ErrorCode.INVALID_REQUEST, exc.args[0] if exc.args else "invalid quota") from None
    if not given:
        return None
    return {"entity": as_dict,
            "ops": [{"key": k, "remove": True} if remove else {"key": k, "value": float(v)} for k, v, remove in given]}


async def handle_alter_client_quotas(apis: KafkaApis, req: RequestFrame, ctx: RequestContext,
                                     conn: Connection) -> Reply:
    body = req.body
    answers: list[dict[str, Any]] = []
    to_send: list[tuple[int, dict[str, Any]]] = []  # (answer index, REST entry)
    try:
        authorize(apis, ctx, ALTER_CONFIGS, CLUSTER)  # Kafka: ALTER_CONFIGS on the cluster, else every entry
    except Exception as exc:
        err = item_error(exc, "alter client quotas")
        return {"entries": [{"error_code": int(err.code), "error_message": err.message,
                             "entity": [{"entity_type": d.entity_type, "entity_name": d.entity_name}
                                        for d in e.entity]} for e in body.entries]}, 0
    for e in body.entries:
        answer = {"error_code": 0, "error_message": None,
                  "entity": [{"entity_type": d.entity_type, "entity_name": d.entity_name} for d in e.entity]}
        try:
            entry = rest_alteration(((d.entity_type, d.entity_name) for d in e.entity),
                                    ((o.key, float(o.value), bool(o.remove)) for o in e.ops))
            if entry is not None:
                to_send.append((len(answers), entry))
        except Exception as exc:
            err = item_error(exc, "alter client quotas")
            answer.update(error_code=int(err.code), error_message=err.message)
        answers.append(answer)
    for i in range(0, len(to_send), REST_BATCH):
        batch = to_send[i:i + REST_BATCH]
        try:
            result = await links(apis).alter_quotas([entry for _, entry in batch], bool(body.validate_only))
            if not result.ok:
                raise ItemError(result.error, result.message or result.error.name)
        except Exception as exc:
            err = item_error(exc, "alter client quotas")
            for index, _ in batch:
                answers[index].update(error_code=int(err.code), error_message=err.message)
    return {"entries": answers}, 0
