"""DescribeLogDirs across the cluster (Kafka's ``kafka-log-dirs.sh --describe``): the controller asks each
live broker (its DescribeLogDirs gRPC method) and returns, per broker, its log directory, the file
system's total and usable bytes, the bytes its replicas take, and per partition the size and offset lag.
A broker that does not answer is listed with its error, the others still are."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import grpc
from pydantic import BaseModel, Field

from services.controller.api import ControllerApi
from shared.errors import ErrorCode, TidelogError
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.request_context import RequestContext
from shared.security.transport import aio_channel
from shared.service import GRPC_OPTIONS

ASK_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class DescribeLogDirs:
    brokers: list[int] | None = None  # None: every live broker
    topics: list[str] | None = None  # None: every partition


class PartitionLogDir(BaseModel):
    topic: str
    partition: int
    size: int = Field(description="bytes of the replica's segment files")
    offset_lag: int = Field(description="max(0, high watermark - log end offset)")
    is_future: bool = False


class BrokerLogDirs(BaseModel):
    broker: int
    error: str | None = Field(None, description="why the broker did not answer (Kafka error name)")
    log_dir: str = ""
    total_bytes: int = -1
    usable_bytes: int = -1
    size: int = Field(0, description="bytes of every replica held in the directory")
    partitions: list[PartitionLogDir] = []


class LogDirsView(BaseModel):
    brokers: list[BrokerLogDirs]


async def _ask(broker: int, address: str, topics: list[str] | None) -> BrokerLogDirs:
    req = pb.DescribeLogDirsRequest(topics=[pb.DescribeLogDirsTopic(name=t) for t in topics or []])
    try:
        async with aio_channel(address, options=GRPC_OPTIONS) as channel:
            resp = await pb_grpc.BrokerStub(channel).DescribeLogDirs(req, timeout=ASK_TIMEOUT_S)
    except grpc.aio.AioRpcError as exc:
        return BrokerLogDirs(broker=broker, error=f"{ErrorCode.BROKER_NOT_AVAILABLE.name}: {exc.code().name}")
    out = BrokerLogDirs(broker=broker)
    for d in resp.results[:1]:  # one log directory per broker
        out.log_dir, out.total_bytes, out.usable_bytes = d.log_dir, d.total_bytes, d.usable_bytes
        if d.error_code:
            out.error = ErrorCode(d.error_code).name
        out.partitions = [PartitionLogDir(topic=t.name, partition=p.partition, size=p.size, offset_lag=p.offset_lag,
                                          is_future=p.is_future) for t in d.topics for p in t.partitions]
        out.size = sum(p.size for p in out.partitions)
    return out


async def describe_log_dirs(c: ControllerApi, ctx: RequestContext, request: DescribeLogDirs) -> LogDirsView:
    snap = await c.store.get_prefix(c.store.keys.brokers_prefix())
    live = {int(v["id"]): v["address"] for v, _, _ in snap.values()}
    if request.brokers is not None and (unknown := sorted(set(request.brokers) - set(live))):
        raise TidelogError(f"no live broker {unknown[0] if len(unknown) == 1 else unknown}",
                           code=ErrorCode.BROKER_NOT_AVAILABLE)
    ids = sorted(live if request.brokers is None else set(request.brokers))
    answers = await asyncio.gather(*(_ask(b, live[b], request.topics) for b in ids))
    return LogDirsView(brokers=list(answers))
