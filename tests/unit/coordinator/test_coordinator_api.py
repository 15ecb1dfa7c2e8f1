"""The group coordinator's request layer: every method of the GroupCoordinator service enters through the
request context once and hands that very context to its API module (where per-group ACLs will be
checked); a refused call reaches no API. Then two calls end to end through the registered handlers, on a
real group shard with the writes completed by the test."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

import services.coordinator.servicer as servicer_module
from services.coordinator.api import CoordinatorApi
from services.coordinator.classic_service import ClassicGroupService
from services.coordinator.config import GroupConfig
from services.coordinator.runtime import PartitionRuntime
from services.coordinator.servicer import GroupCoordinatorServicer, add_to_server
from services.coordinator.shard import GroupShard
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext

SERVICE = cpb.DESCRIPTOR.services_by_name["GroupCoordinator"]
PEER = "ipv4:127.0.0.1:5555"


class Aborted(Exception):
    pass


class FakeContext:
    def __init__(self) -> None:
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def peer(self) -> str:
        return PEER

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise Aborted(details)


class Recorder:
    """Stands in for the gRPC server: keeps the handlers registered."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.handlers.update(handlers)


def _api_name(method: str) -> str:
    """``OffsetCommitStream`` -> ``offset_commit_stream``: the API function the servicer calls."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", method).lower()


async def _call(h: grpc.RpcMethodHandler, request: Any, context: FakeContext) -> Any:
    behavior = h.unary_unary or h.unary_stream or h.stream_unary or h.stream_stream
    out = behavior(request, context)
    if hasattr(out, "__aiter__"):
        return [x async for x in out]
    return await out


class ApiCalls:
    """Stands in for every API function of the servicer: records ``(method, c, ctx, request)``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, Any, RequestContext, Any]] = []
        for m in SERVICE.methods:
            monkeypatch.setattr(servicer_module, _api_name(m.name), self._fake(m.name, m.server_streaming))

    def _fake(self, method: str, streaming: bool) -> Any:
        if streaming:
            async def stream(c: Any, ctx: RequestContext, requests: AsyncIterator[Any]) -> AsyncIterator[str]:
                self.calls.append((method, c, ctx, requests))
                yield method

            return stream

        async def unary(c: Any, ctx: RequestContext, request: Any) -> str:
            self.calls.append((method, c, ctx, request))
            return method

        return unary


def _registered(authorize: Any) -> tuple[Recorder, CoordinatorApi]:
    api = CoordinatorApi(runtime=None, classic=None)  # type: ignore[arg-type]  # the API functions are fakes
    server = Recorder()
    add_to_server(GroupCoordinatorServicer(api), server, authorize)
    return server, api


def test_every_method_hands_the_context_it_entered_with_to_its_api(monkeypatch: pytest.MonkeyPatch) -> None:
    entered: list[RequestContext] = []

    def allow(ctx: RequestContext) -> bool:
        entered.append(ctx)
        return True

    apis = ApiCalls(monkeypatch)
    server, api = _registered(allow)
    methods = [m.name for m in SERVICE.methods]
    assert sorted(server.handlers) == sorted(methods)
    for name in methods:
        request = object()
        out = asyncio.run(_call(server.handlers[name], request, FakeContext()))
        assert out in (name, [name])
        method, c, ctx, got = apis.calls[-1]
        assert (method, got) == (name, request) and c is api
        assert ctx is entered[-1]  # built once, by the hook's entry, and handed on
        assert (ctx.api, ctx.peer) == (name, PEER)
    assert len(entered) == len(apis.calls) == len(methods)


def test_a_refused_call_reaches_no_api(monkeypatch: pytest.MonkeyPatch) -> None:
    apis = ApiCalls(monkeypatch)
    server, _ = _registered(lambda ctx: ctx.api == "FindCoordinator")  # refuses all but one
    for m in SERVICE.methods:
        context = FakeContext()
        if m.name == "FindCoordinator":
            asyncio.run(_call(server.handlers[m.name], object(), context))
            continue
        with pytest.raises(Aborted, match=f"may not call {m.name}"):
            asyncio.run(_call(server.handlers[m.name], object(), context))
        assert context.aborted is not None and context.aborted[0] == grpc.StatusCode.PERMISSION_DENIED
    assert [call[0] for call in apis.calls] == ["FindCoordinator"]


def test_unary_client_id_comes_from_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    apis = ApiCalls(monkeypatch)
    server, _ = _registered(lambda ctx: True)
    asyncio.run(_call(server.handlers["JoinGroup"], cpb.JoinGroupRequest(group_id="g", client_id="app-1"),
                      FakeContext()))
    asyncio.run(_call(server.handlers["OffsetFetch"], cpb.OffsetFetchRequest(group_id="g"), FakeContext()))
    assert [call[2].client_id for call in apis.calls] == ["app-1", ""]


T_ID = "00000000000000000000000000000001"


class OnePartition:
    """Stands in for ``CoordinatorRuntime``: one loaded partition with a real shard; queued writes
    complete when the test says."""

    def __init__(self) -> None:
        shard = GroupShard(0, GroupConfig(), new_member_id=lambda: "member-1")
        shard.set_topics({"t": (T_ID, 4)})
        self.pr = PartitionRuntime(0, shard, owner_revision=1, loaded=True)
        self.partitions = {0: self.pr}
        self.queued: list[asyncio.Future[int]] = []

    def runtime_for(self, group_id: str) -> PartitionRuntime:
        return self.pr

    def now_ms(self) -> int:
        return 1_000

    async def write(self, pr: PartitionRuntime, recs: list[Any]) -> None:
        pass

    def submit(self, pr: PartitionRuntime, recs: list[Any]) -> asyncio.Future[int]:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.queued.append(fut)
        return fut


def _end_to_end() -> tuple[Recorder, OnePartition]:
    runtime = OnePartition()
    api = CoordinatorApi(runtime, ClassicGroupService(runtime))  # type: ignore[arg-type]
    server = Recorder()
    add_to_server(GroupCoordinatorServicer(api), server)
    return server, runtime


def test_the_member_s_client_host_is_the_entered_peer() -> None:
    server, _ = _end_to_end()

    async def scenario() -> cpb.DescribeGroupsResponse:
        joined = await _call(server.handlers["ConsumerGroupHeartbeat"], cpb.ConsumerGroupHeartbeatRequest(
            group_id="g", member_epoch=0, subscribed_topic_names=["t"], client_id="app-1"), FakeContext())
        assert (joined.error_code, joined.member_id) == (0, "member-1")
        return await _call(server.handlers["DescribeGroups"], cpb.DescribeGroupsRequest(group_ids=["g", "nope"]),
                           FakeContext())

    described = asyncio.run(scenario())
    g, missing = described.groups
    assert [(m.member_id, m.client_id, m.client_host) for m in g.members] == [("member-1", "app-1", "/127.0.0.1")]
    assert (missing.error_code, missing.state) == (ErrorCode.GROUP_ID_NOT_FOUND, "Dead")


def _commit(offset: int) -> cpb.OffsetCommitRequest:
    return cpb.OffsetCommitRequest(group_id="g", member_epoch=-1, topics=[cpb.OffsetCommitTopic(
        name="t", partitions=[cpb.OffsetCommitPartition(partition=0, committed_offset=offset)])])


def test_a_commit_stream_queues_each_commit_as_read_and_answers_in_order() -> None:
    server, runtime = _end_to_end()

    async def scenario() -> list[cpb.OffsetCommitBatchResponse]:
        async def batches() -> AsyncIterator[cpb.OffsetCommitBatch]:
            yield cpb.OffsetCommitBatch(commits=[_commit(10), _commit(20)])
            yield cpb.OffsetCommitBatch(commits=[_commit(30)])

        answers = asyncio.ensure_future(_call(server.handlers["OffsetCommitStream"], batches(), FakeContext()))
        while len(runtime.queued) < 3:  # every commit queued as it is read, before any is written
            await asyncio.sleep(0)
        for fut in reversed(runtime.queued):  # the brokers answer the last write first
            fut.set_result(0)
        return await answers

    answers = asyncio.run(scenario())
    assert [len(a.responses) for a in answers] == [2, 1]
    assert all(r.error_code == 0 and r.topics[0].partitions[0].error_code == 0
               for a in answers for r in a.responses)
    offsets = runtime.pr.shard.fetch_offsets("g", None)
    assert offsets[next(iter(offsets))].offset == 10  # each applied as its write completed: 30, 20, then 10
