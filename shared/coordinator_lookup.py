"""FindCoordinator answers, shared by brokers and coordinator instances: group -> its
``__consumer_offsets`` partition -> the instance owning it (from the ownership keys in etcd)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shared.errors import ErrorCode
from shared.offsets_topic import locate
from shared.proto import tidelog_pb2 as pb


def find_coordinators(group_ids: Iterable[str], partitions: int, owners: dict[int, dict[str, Any]]) -> pb.FindCoordinatorResponse:
    resp = pb.FindCoordinatorResponse()
    for g in group_ids:
        if not partitions:
            resp.coordinators.add(group_id=g, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                  error_message="__consumer_offsets does not exist yet", partition=-1)
            continue
        p, owner = locate(g, partitions, owners)
        if owner is None:
            resp.coordinators.add(group_id=g, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                  error_message=f"no coordinator owns partition {p} yet", partition=p)
        else:
            resp.coordinators.add(group_id=g, node_id=str(owner.get("owner", "")), address=str(owner.get("address", "")),
                                  partition=p)
    return resp
