"""Kafka's DescribeUserScramCredentials / AlterUserScramCredentials (``/v1/users``), over
``shared.security.acl_store``.

Only the salted credential (salt, StoredKey, ServerKey, iterations) reaches etcd; the password is never
stored, logged, audited or answered (``SecretStr`` in the request). Each change is an ``admin_change``
audit event. The rights (CLUSTER DESCRIBE to list, ALTER to change, as Kafka) are checked at the REST door
(``rest/rules.py``). Store and audit call are ``acl_admin``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, StrictStr

from services.controller.api import ControllerApi
from services.controller.api.acl_admin import audit_change, security_store, upper
from shared.errors import ErrorCode, TidelogError
from shared.request_context import RequestContext
from shared.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS

NAME_MAX = 255
#: User names as a path segment too (``DELETE /v1/users/{name}``): no control characters, no '/'.
USER_NAME_PATTERN = r"^[^\x00-\x1f\x7f-\x9f/]+$"
PASSWORD_MAX = 1024
MechanismName = Annotated[Literal["SCRAM-SHA-256", "SCRAM-SHA-512"], BeforeValidator(upper)]
UserName = Annotated[StrictStr, Field(min_length=1, max_length=NAME_MAX, pattern=USER_NAME_PATTERN,
                                      description="the SCRAM user name; its principal is User:<name>")]


class UpsertUser(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: UserName
    password: SecretStr = Field(..., min_length=1, max_length=PASSWORD_MAX)
    mechanism: MechanismName = "SCRAM-SHA-512"
    iterations: int = Field(DEFAULT_ITERATIONS, ge=MIN_ITERATIONS, le=MAX_ITERATIONS,
                            description="PBKDF2 iterations (Kafka's bounds: 4096 to 16384)")


@dataclass(frozen=True, slots=True)
class DescribeUsers:
    pass


@dataclass(frozen=True, slots=True)
class DeleteUser:
    name: str
    mechanism: str | None = None  # None: every mechanism


class UserCredential(BaseModel):
    name: str
    mechanism: str
    iterations: int
    created: bool = Field(..., description="false when an existing credential was replaced")


class CredentialInfo(BaseModel):
    mechanism: str
    iterations: int


class UserView(BaseModel):
    name: str
    mechanisms: list[CredentialInfo]


class UserList(BaseModel):
    users: list[UserView]


async def describe_users(c: ControllerApi, ctx: RequestContext, request: DescribeUsers) -> UserList:
    users = await security_store(c).list_users()
    return UserList(users=[UserView(name=u.name, mechanisms=[CredentialInfo(mechanism=m, iterations=i)
                                                             for m, i in u.mechanisms.items()]) for u in users])


async def upsert_user(c: ControllerApi, ctx: RequestContext, request: UpsertUser) -> UserCredential:
    store = security_store(c)
    existed = await store.get_credential(request.name, request.mechanism) is not None
    await store.upsert_user(request.name, request.password.get_secret_value(), request.mechanism,
                            request.iterations)
    audit_change(ctx, "AlterUserScramCredentials", f"USER:{request.name}",
                 f"{'replace' if existed else 'create'} {request.mechanism} credential, "
                 f"iterations={request.iterations}")
    return UserCredential(name=request.name, mechanism=request.mechanism, iterations=request.iterations,
                          created=not existed)


async def delete_user(c: ControllerApi, ctx: RequestContext, request: DeleteUser) -> None:
    """RESOURCE_NOT_FOUND (Kafka's answer to deleting a credential that is not there) when none was."""
    if not await security_store(c).delete_user(request.name, request.mechanism):
        what = f"{request.mechanism} credential" if request.mechanism else "credential"
        raise TidelogError(f"user {request.name!r} has no {what}", code=ErrorCode.RESOURCE_NOT_FOUND)
    audit_change(ctx, "AlterUserScramCredentials", f"USER:{request.name}",
                 f"delete {request.mechanism or 'every'} credential")
