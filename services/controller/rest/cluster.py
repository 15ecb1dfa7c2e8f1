"""``/v1/cluster``: who is in the cluster right now (``services.controller.api.describe_cluster``)."""

from __future__ import annotations

from fastapi import APIRouter

from services.controller.api import describe_cluster as describe_cluster_api
from services.controller.api.describe_cluster import ClusterInfo
from services.controller.rest.deps import Api, Ctx

router = APIRouter(prefix="/v1", tags=["cluster"])


@router.get("/cluster", response_model=ClusterInfo, summary="Cluster id, active controller, live members")
async def get_cluster(c: Api, ctx: Ctx) -> ClusterInfo:
    return await describe_cluster_api.describe_cluster(c, ctx, describe_cluster_api.DescribeCluster())
