"""ControlledShutdown, from a broker about to stop: the active controller moves its leaderships away
and answers how many it still holds (partitions where it is the only ISR member). When security is on,
only broker ``broker_id``'s own service certificate with CLUSTER_ACTION may ask
(``authz.broker_refusal``: CLUSTER_AUTHORIZATION_FAILED): its incarnation is no secret."""

from __future__ import annotations

from dataclasses import dataclass

from services.controller.api import ControllerApi
from services.controller.authz import broker_refusal
from shared.errors import ErrorCode, TidelogError
from shared.request_context import RequestContext
from shared.security.access import access_of


@dataclass(frozen=True, slots=True)
class ControlledShutdownRequest:
    broker_id: int
    incarnation: str


@dataclass(frozen=True, slots=True)
class ControlledShutdownResponse:
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    remaining_leaderships: int = 0


async def controlled_shutdown(c: ControllerApi, ctx: RequestContext,
                              request: ControlledShutdownRequest) -> ControlledShutdownResponse:
    if (why := broker_refusal(access_of(c), ctx, request.broker_id)) is not None:
        return ControlledShutdownResponse(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, why)
    pc = c.active_partitions()
    if pc is None:
        return ControlledShutdownResponse(ErrorCode.NOT_CONTROLLER, "not the active controller")
    try:
        stuck = await pc.controlled_shutdown(request.broker_id, request.incarnation)
    except TidelogError as exc:
        return ControlledShutdownResponse(exc.code, str(exc))
    return ControlledShutdownResponse(remaining_leaderships=stuck)
