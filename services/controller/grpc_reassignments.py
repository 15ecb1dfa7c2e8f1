"""The gRPC door of AlterPartitionReassignments and ListPartitionReassignments: translation only
(protobuf <-> ``services.controller.api``'s typed requests, errors -> Kafka error codes). Used by
``grpc_api.ControllerServicer``. As the controller's other gRPC methods, only the active controller
answers; a standby answers NOT_CONTROLLER (REST's GET /v1/reassignments is answered by any). When
security is on: CLUSTER ALTER to alter, CLUSTER DESCRIBE to list (CLUSTER_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from pydantic import ValidationError

from services.controller.api import ControllerApi
from services.controller.api import alter_partition_reassignments as alter_api
from services.controller.api import list_partition_reassignments as list_api
from services.controller.authz import Op, Res, audit_change, denied_error
from shared.errors import ErrorCode, TidelogError
from shared.proto import tidelog_pb2 as pb
from shared.request_context import RequestContext
from shared.security.access import access_of
from shared.security.acl import CLUSTER_NAME


async def alter(c: ControllerApi, ctx: RequestContext,
                request: pb.AlterPartitionReassignmentsRequest) -> pb.AlterPartitionReassignmentsResponse:
    if (access := access_of(c)) is not None and not access.allowed(ctx, Op.ALTER, Res.CLUSTER, CLUSTER_NAME):
        exc = denied_error(ctx, Op.ALTER, Res.CLUSTER, CLUSTER_NAME)
        return pb.AlterPartitionReassignmentsResponse(error_code=exc.code, error_message=str(exc))
    if not c.active:
        return pb.AlterPartitionReassignmentsResponse(error_code=ErrorCode.NOT_CONTROLLER,
                                                      error_message="not the active controller")
    try:
        plan = alter_api.ReassignmentPlan(version=1, partitions=[
            alter_api.PlanPartition(topic=p.topic, partition=p.partition,
                                    replicas=None if p.cancel else list(p.replicas))
            for p in request.partitions])
    except ValidationError as exc:
        return pb.AlterPartitionReassignmentsResponse(error_code=ErrorCode.INVALID_REQUEST,
                                                      error_message=str(exc).replace("\n", "; "))
    try:
        result = await alter_api.alter_partition_reassignments(c, ctx, plan)
    except TidelogError as exc:
        return pb.AlterPartitionReassignmentsResponse(error_code=exc.code, error_message=str(exc))
    audit_change(ctx, "CLUSTER:" + CLUSTER_NAME,
                 "reassign " + ", ".join(f"{p.topic}-{p.partition}" for p in request.partitions)[:500])
    return pb.AlterPartitionReassignmentsResponse(partitions=[
        pb.PartitionReassignment(topic=r.topic, partition=r.partition, replicas=r.replicas,
                                 adding_replicas=r.adding_replicas, removing_replicas=r.removing_replicas,
                                 done=r.done) for r in result.partitions])


async def list_(c: ControllerApi, ctx: RequestContext,
                request: pb.ListPartitionReassignmentsRequest) -> pb.ListPartitionReassignmentsResponse:
    if (access := access_of(c)) is not None and not access.allowed(ctx, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME):
        exc = denied_error(ctx, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME)
        return pb.ListPartitionReassignmentsResponse(error_code=exc.code, error_message=str(exc))
    if not c.active:
        return pb.ListPartitionReassignmentsResponse(error_code=ErrorCode.NOT_CONTROLLER,
                                                     error_message="not the active controller")
    try:
        got = await list_api.list_partition_reassignments(
            c, ctx, list_api.ListPartitionReassignments(topics=list(request.topics) or None))
    except TidelogError as exc:
        return pb.ListPartitionReassignmentsResponse(error_code=exc.code, error_message=str(exc))
    return pb.ListPartitionReassignmentsResponse(reassignments=[
        pb.PartitionReassignment(topic=r.topic, partition=r.partition, replicas=r.replicas,
                                 adding_replicas=r.adding_replicas, removing_replicas=r.removing_replicas,
                                 target_replicas=r.target_replicas) for r in got.reassignments])
