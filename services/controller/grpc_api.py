"""The controller's gRPC service (AlterPartition, ControlledShutdown). Translation only."""

from __future__ import annotations

from typing import Any

from services.controller.partitions import MAX_ALTER_PARTITION_ITEMS
from services.controller.replication import PartitionController
from shared.errors import ErrorCode, TidelogError
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.types import TopicPartition


class ControllerServicer(pb_grpc.ControllerServicer):
    def __init__(self, controller: Any) -> None:
        self.controller = controller

    def _partitions(self) -> PartitionController | None:
        election = self.controller.election
        if election is None or not election.active:
            return None
        return self.controller.partitions

    async def AlterPartition(self, request: pb.AlterPartitionRequest, context: Any) -> pb.AlterPartitionResponse:
        pc = self._partitions()
        if pc is None:
            return pb.AlterPartitionResponse(error_code=ErrorCode.NOT_CONTROLLER, error_message="not the active controller")
        if request.items:
            return await self._alter_partitions(pc, request)
        try:
            st = await pc.alter_partition(request.broker_id, request.incarnation,
                                          TopicPartition(request.topic, request.partition),
                                          request.leader_epoch, request.partition_epoch, list(request.new_isr))
        except TidelogError as exc:
            return pb.AlterPartitionResponse(error_code=exc.code, error_message=str(exc))
        return pb.AlterPartitionResponse(leader=st.leader, leader_epoch=st.leader_epoch, isr=st.isr,
                                         partition_epoch=st.partition_epoch)

    async def _alter_partitions(self, pc: PartitionController, request: pb.AlterPartitionRequest) -> pb.AlterPartitionResponse:
        if len(request.items) > MAX_ALTER_PARTITION_ITEMS:
            return pb.AlterPartitionResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=(
                f"{len(request.items)} partitions in one AlterPartition request; at most {MAX_ALTER_PARTITION_ITEMS}"))
        items = [(TopicPartition(i.topic, i.partition), i.leader_epoch, i.partition_epoch, list(i.new_isr))
                 for i in request.items]
        try:
            results = await pc.alter_partitions(request.broker_id, request.incarnation, items)
        except TidelogError as exc:  # the whole request: stale broker epoch, no longer the controller
            return pb.AlterPartitionResponse(error_code=exc.code, error_message=str(exc))
        out = []
        for (tp, _, _, _), r in zip(items, results):
            if isinstance(r, TidelogError):
                out.append(pb.AlterPartitionItemResult(topic=tp.topic, partition=tp.partition, error_code=r.code,
                                                       error_message=str(r)))
            else:
                out.append(pb.AlterPartitionItemResult(topic=tp.topic, partition=tp.partition, leader=r.leader,
                                                       leader_epoch=r.leader_epoch, isr=r.isr,
                                                       partition_epoch=r.partition_epoch))
        return pb.AlterPartitionResponse(items=out)

    async def ControlledShutdown(self, request: pb.ControlledShutdownRequest, context: Any) -> pb.ControlledShutdownResponse:
        pc = self._partitions()
        if pc is None:
            return pb.ControlledShutdownResponse(error_code=ErrorCode.NOT_CONTROLLER, error_message="not the active controller")
        try:
            stuck = await pc.controlled_shutdown(request.broker_id, request.incarnation)
        except TidelogError as exc:
            return pb.ControlledShutdownResponse(error_code=exc.code, error_message=str(exc))
        return pb.ControlledShutdownResponse(remaining_leaderships=stuck)
