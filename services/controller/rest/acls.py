"""``/v1/acls``: Kafka's DescribeAcls / CreateAcls / DeleteAcls over REST.

    GET    /v1/acls?resource_type=&resource_name=&pattern_type=&principal=&host=&operation=&permission=
                                   the bindings matching the filter (an absent parameter or ANY matches anything)
    POST   /v1/acls                {"acls": [binding, ...]}: create them (all validated first, all or none)
    DELETE /v1/acls?<same filter>  delete every binding the filter matches; answers the deleted bindings

A binding is ``{"resource_type", "resource_name", "pattern_type", "principal", "host", "operation",
"permission_type"}`` with Kafka's names. Filters are Kafka's ``AclBindingFilter``: ``pattern_type=ANY`` (the
default) compares names exactly across LITERAL and PREFIXED, ``MATCH`` selects every binding that applies to
``resource_name`` (the literal, the literal ``*``, the prefixes of it), ``LITERAL`` / ``PREFIXED`` only that
pattern type. Each route translates onto ``services.controller.api.acl_admin``, which audits every binding
created or deleted (``audited_in_detail`` keeps the app's one-line-per-request audit from repeating it).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import AfterValidator, BeforeValidator

from services.controller.api import acl_admin as acl_admin_api
from services.controller.api.acl_admin import NAME_MAX, NO_CONTROL, check_host, check_principal, upper
from services.controller.rest.deps import Api, Ctx
from services.controller.rest.errors import error_responses
from shared.security.acl import (
    AccessControlEntryFilter,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePatternFilter,
    ResourceType,
)

router = APIRouter(prefix="/v1/acls", tags=["acls"])

_ANY = "absent or ANY: any"
_E400 = error_responses(400)


def acl_filter(
    resource_type: Annotated[Literal["ANY", "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "USER"] | None,
                             BeforeValidator(upper), Query(description=_ANY)] = None,
    resource_name: Annotated[str | None, Query(description="absent: any name", min_length=1, max_length=NAME_MAX,
                                               pattern=NO_CONTROL)] = None,
    pattern_type: Annotated[Literal["ANY", "MATCH", "LITERAL", "PREFIXED"] | None, BeforeValidator(upper),
                            Query(description="ANY (default): names compared exactly; MATCH: every pattern that "
                                  "applies to resource_name; LITERAL / PREFIXED: only that pattern type")] = None,
    principal: Annotated[str | None, AfterValidator(check_principal),
                         Query(description="absent: any (exact: User:alice does not select User:*)",
                               max_length=NAME_MAX + 5, pattern=NO_CONTROL)] = None,
    host: Annotated[str | None, AfterValidator(check_host), Query(description="absent: any", max_length=64)] = None,
    operation: Annotated[Literal["ANY", "ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE",
                                 "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
                                 "CREATE_TOKENS", "DESCRIBE_TOKENS"] | None,
                         BeforeValidator(upper), Query(description=_ANY)] = None,
    permission: Annotated[Literal["ANY", "ALLOW", "DENY"] | None, BeforeValidator(upper),
                          Query(description=_ANY)] = None,
) -> AclBindingFilter:
    """The query parameters as Kafka's ``AclBindingFilter``."""
    return AclBindingFilter(
        ResourcePatternFilter(ResourceType[resource_type or "ANY"], resource_name, PatternType[pattern_type or "ANY"]),
        AccessControlEntryFilter(principal, host, AclOperation[operation or "ANY"],
                                 AclPermissionType[permission or "ANY"]),
    )


Filter = Annotated[AclBindingFilter, Depends(acl_filter)]


def audited_in_detail(request: Request) -> None:
    """The API wrote one ``admin_change`` per binding or credential changed (none when nothing changed):
    the app's per-request ``admin_change`` (``app.py``'s middleware, keyed on ``request.state.admin_change``)
    would only repeat it without the detail."""
    request.state.admin_change = None


@router.get("", response_model=acl_admin_api.AclList, summary="Describe ACL bindings (Kafka's DescribeAcls)",
            responses=_E400)
async def describe_acls(c: Api, ctx: Ctx, flt: Filter) -> acl_admin_api.AclList:
    return await acl_admin_api.describe_acls(c, ctx, flt)


@router.post("", response_model=acl_admin_api.CreateAclsResult, summary="Create ACL bindings (Kafka's CreateAcls)",
             responses=_E400)
async def create_acls(body: acl_admin_api.CreateAcls, request: Request, c: Api,
                      ctx: Ctx) -> acl_admin_api.CreateAclsResult:
    result = await acl_admin_api.create_acls(c, ctx, body)
    audited_in_detail(request)
    return result


@router.delete("", response_model=acl_admin_api.AclList,
               summary="Delete the ACL bindings a filter matches (Kafka's DeleteAcls)", responses=_E400)
async def delete_acls(request: Request, c: Api, ctx: Ctx, flt: Filter) -> acl_admin_api.AclList:
    result = await acl_admin_api.delete_acls(c, ctx, flt)
    audited_in_detail(request)
    return result
