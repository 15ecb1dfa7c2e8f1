"""``/v1/users``: SCRAM users (Kafka's DescribeUserScramCredentials / AlterUserScramCredentials).

    GET    /v1/users                       every user: name, and per mechanism its iteration count
    POST   /v1/users                       {"name", "password", "mechanism", "iterations"}: create (201) or
                                           replace (200) that user's credential for that mechanism
    DELETE /v1/users/{name}[?mechanism=]   one mechanism's credential, or all of the user's (404 if none)

Never answers a credential or a password. Each route translates onto ``services.controller.api.user_admin``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from services.controller.api import user_admin as user_admin_api
from services.controller.api.user_admin import NAME_MAX, USER_NAME_PATTERN, MechanismName
from services.controller.rest.acls import audited_in_detail
from services.controller.rest.deps import Api, Ctx
from services.controller.rest.errors import ErrorBody, error_responses
from shared.errors import ErrorCode, TidelogError

router = APIRouter(prefix="/v1/users", tags=["users"])


@router.get("", response_model=user_admin_api.UserList, summary="List SCRAM users (names, mechanisms, iterations)")
async def describe_users(c: Api, ctx: Ctx) -> user_admin_api.UserList:
    return await user_admin_api.describe_users(c, ctx, user_admin_api.DescribeUsers())


@router.post("", status_code=201, response_model=user_admin_api.UserCredential,
             summary="Create a user, or replace its credential for one mechanism",
             responses={200: {"model": user_admin_api.UserCredential,
                              "description": "The user's credential for this mechanism was replaced"},
                        **error_responses(400)})
async def upsert_user(body: user_admin_api.UpsertUser, request: Request, response: Response, c: Api,
                      ctx: Ctx) -> user_admin_api.UserCredential:
    result = await user_admin_api.upsert_user(c, ctx, body)
    audited_in_detail(request)
    if not result.created:
        response.status_code = 200
    return result


@router.delete("/{name}", status_code=204, summary="Delete a user's credential (one mechanism, or all)",
               responses=error_responses(400, e404="No such user or credential (RESOURCE_NOT_FOUND)"))
async def delete_user(name: Annotated[str, Path(min_length=1, max_length=NAME_MAX, pattern=USER_NAME_PATTERN)],
                      request: Request, c: Api, ctx: Ctx,
                      mechanism: Annotated[MechanismName | None, Query(description="absent: every mechanism")] = None,
                      ) -> Response:
    try:
        await user_admin_api.delete_user(c, ctx, user_admin_api.DeleteUser(name, mechanism))
    except TidelogError as exc:
        if exc.code != ErrorCode.RESOURCE_NOT_FOUND:
            raise
        body = ErrorBody(error=exc.code.name, message=str(exc))
        return JSONResponse(status_code=404, content=body.model_dump(exclude_none=True))
    audited_in_detail(request)
    return Response(status_code=204)
