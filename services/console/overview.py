"""Overview (services and their health, the active controller and its epoch, partition counts), Brokers
(racks, replicas, leaders) and Compaction (the cleaner's status): pages and their JSON."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.console.web import metrics, render, rest
from shared.security.transport import aio_channel

router = APIRouter()


async def grpc_health(address: str, timeout: float = 1.0) -> str:
    """SERVING, NOT_SERVING or UNREACHABLE: the standard gRPC health service every Tidelog service runs."""
    try:
        async with aio_channel(address) as ch:
            reply = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=timeout)
    except grpc.aio.AioRpcError:
        return "UNREACHABLE"
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def partition_counts(described: list[dict[str, Any]], live_brokers: set[int]) -> dict[str, Any]:
    """Totals and per topic: partitions, under-replicated (ISR smaller than the replicas), offline (no live
    leader)."""
    per_topic = []
    totals = {"topics": 0, "partitions": 0, "under_replicated": 0, "offline": 0}
    for t in described:
        parts = t["partitions"]
        under = sum(1 for p in parts if len(p["isr"]) < len(p["replicas"]))
        offline = sum(1 for p in parts if p["leader"] < 0 or p["leader"] not in live_brokers)
        per_topic.append({"name": t["name"], "partitions": len(parts), "replication_factor": t["replication_factor"],
                          "under_replicated": under, "offline": offline})
        totals["topics"] += 1
        totals["partitions"] += len(parts)
        totals["under_replicated"] += under
        totals["offline"] += offline
    return {"totals": totals, "topics": per_topic}


async def describe_all(request: Request) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    api = rest(request)
    cluster, names = await asyncio.gather(api.cluster(), api.topics())
    found = await asyncio.gather(*(api.topic(n) for n in names), return_exceptions=True)
    return cluster, [d for d in found if isinstance(d, dict)]  # a topic deleted meanwhile is skipped


async def overview_data(request: Request) -> dict[str, Any]:
    cluster, described = await describe_all(request)
    active = cluster.get("controller") or {}
    members: list[dict[str, Any]] = []
    for c in cluster["controllers"]:
        members.append({"role": "controller", "id": c["id"], "address": c["address"],
                        "active": str(c["id"]) == str(active.get("id"))})
    for b in cluster["brokers"]:
        members.append({"role": "broker", "id": str(b["id"]), "address": b["address"], "active": False})
    for role, instances in sorted(cluster["services"].items()):
        members.extend({"role": role, "id": i["id"], "address": i["address"], "active": False} for i in instances)
    health = await asyncio.gather(*(grpc_health(m["address"]) for m in members))
    for m, h in zip(members, health, strict=True):
        m["health"] = h
    counts = partition_counts(described, {b["id"] for b in cluster["brokers"]})
    return {"cluster": cluster["cluster"], "cluster_id": cluster["cluster_id"], "controller": cluster["controller"],
            "services": members, "partitions": counts["totals"], "topics": counts["topics"],
            "bootstrap": ",".join(b["address"] for b in cluster["brokers"]),
            "kafka_bootstrap": cluster.get("kafka_bootstrap", ""), "traffic": metrics(request).traffic()}


@router.get("/", response_class=HTMLResponse)
async def overview_page(request: Request) -> HTMLResponse:
    return render(request, "overview.html", {"title": "Overview", "o": await overview_data(request)})


@router.get("/api/overview")
async def overview_json(request: Request) -> dict[str, Any]:
    return await overview_data(request)


async def brokers_data(request: Request) -> list[dict[str, Any]]:
    cluster, described = await describe_all(request)
    replicas: dict[int, int] = {}
    leaders: dict[int, int] = {}
    for t in described:
        for p in t["partitions"]:
            for r in p["replicas"]:
                replicas[r] = replicas.get(r, 0) + 1
            leaders[p["leader"]] = leaders.get(p["leader"], 0) + 1
    health = await asyncio.gather(*(grpc_health(b["address"]) for b in cluster["brokers"]))
    sampled = metrics(request).latest
    return [{"id": b["id"], "address": b["address"], "rack": b.get("rack"), "kafka": b.get("kafka"),
             "replicas": replicas.get(b["id"], 0), "leaders": leaders.get(b["id"], 0), "health": h,
             "disk_bytes": sampled[b["id"]].disk_bytes if b["id"] in sampled else None}
            for b, h in zip(cluster["brokers"], health, strict=True)]


@router.get("/brokers", response_class=HTMLResponse)
async def brokers_page(request: Request) -> HTMLResponse:
    return render(request, "brokers.html", {"title": "Brokers", "brokers": await brokers_data(request)})


@router.get("/api/brokers")
async def brokers_json(request: Request) -> dict[str, Any]:
    return {"brokers": await brokers_data(request)}


@router.get("/compaction", response_class=HTMLResponse)
async def compaction_page(request: Request) -> HTMLResponse:
    return render(request, "compaction.html", {"title": "Compaction", "brokers": await rest(request).cleaner()})


@router.get("/api/compaction")
async def compaction_json(request: Request) -> dict[str, Any]:
    return {"brokers": await rest(request).cleaner()}
