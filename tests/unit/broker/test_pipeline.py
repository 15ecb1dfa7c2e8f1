"""The broker's request pipeline without a network: stream order, KIP-219 holds, accounting."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from services.broker.pipeline import NotAuthorized, ProduceSequencer, RequestPipeline, through_pipeline
from services.broker.quota_state import QuotaAccounting
from shared.quota.entities import ANONYMOUS, QuotaType


async def _requests(n: int) -> AsyncIterator[int]:
    for i in range(n):
        yield i


def test_appends_keep_stream_order_whatever_the_begin_stage_awaits() -> None:
    appended: list[int] = []

    async def begin(i: int) -> int:
        await asyncio.sleep(0.001 * (i % 3))  # e.g. a throttle hold: later requests must not overtake
        appended.append(i)
        return i

    async def finish(i: int) -> int:
        await asyncio.sleep(0.001 * ((7 * i) % 5))  # completions finish out of order
        return i

    async def run() -> list[int]:
        return [r async for r in ProduceSequencer(begin, finish).run(_requests(40))]

    assert asyncio.run(run()) == list(range(40))
    assert appended == list(range(40))


def test_responses_ready_at_once_and_awaited_ones_keep_request_order() -> None:
    async def begin(i: int) -> int:
        return i

    async def finish(i: int) -> str:
        await asyncio.sleep(0.001 * ((7 * i) % 5))  # e.g. acks=all waits, finishing out of order
        return f"waited {i}"

    def ready(i: int) -> str | None:  # every third request has nothing to wait for
        return None if i % 3 else f"ready {i}"

    async def run() -> list[str]:
        return [r async for r in ProduceSequencer(begin, finish, ready).run(_requests(30))]

    assert asyncio.run(run()) == [f"ready {i}" if i % 3 == 0 else f"waited {i}" for i in range(30)]


def test_context_accounting_and_throttle() -> None:
    now = [100.0]
    acc = QuotaAccounting(report_interval_s=0.1, expiry_s=2.0)
    pipeline = RequestPipeline(acc, clock=lambda: now[0])
    ctx = pipeline.context("Produce", "app", "ipv4:127.0.0.1:5000")
    assert (ctx.principal, ctx.client_id, ctx.peer, ctx.arrival) == (ANONYMOUS, "app", "ipv4:127.0.0.1:5000", 100.0)
    pipeline.record(ctx, QuotaType.PRODUCE, 1000)
    pipeline.record_handler_time(ctx, 0.002)
    assert acc.drain() == {(QuotaType.PRODUCE, ANONYMOUS, "app"): 1000, (QuotaType.REQUEST, ANONYMOUS, "app"): 0.2}
    acc.apply([(QuotaType.REQUEST, ANONYMOUS, "app", 250, 0.0)], now[0])
    assert pipeline.throttle_ms(ctx, (QuotaType.PRODUCE, QuotaType.REQUEST)) == 250
    assert pipeline.throttle_ms(ctx, (QuotaType.PRODUCE,)) == 0


def test_unary_calls_are_held_per_connection() -> None:
    now = [0.0]
    pipeline = RequestPipeline(clock=lambda: now[0])
    ctx = pipeline.context("Fetch", "app", "peer-a")
    pipeline.set_peer_hold(ctx, 0)
    assert pipeline._peer_holds == {}
    pipeline.set_peer_hold(ctx, 20)
    assert pipeline._peer_holds == {"peer-a": 0.02}


def test_authorization_hook_refuses() -> None:
    pipeline = RequestPipeline(authorize=lambda ctx: ctx.client_id != "evil")
    with pytest.raises(NotAuthorized):
        pipeline.context("Produce", "evil", "p")


class _FakeContext:
    def __init__(self) -> None:
        self.aborted: tuple[object, str] | None = None

    def peer(self) -> str:
        return "ipv4:127.0.0.1:9"

    async def abort(self, code: object, message: str) -> None:
        self.aborted = (code, message)
        raise RuntimeError("aborted")


class _Req:
    client_id = "app"


def test_other_unary_methods_go_through_the_pipeline() -> None:
    acc = QuotaAccounting()
    pipeline = RequestPipeline(acc)

    async def behavior(request: object, context: object) -> str:
        return "answer"

    handle = through_pipeline(pipeline, "Metadata", behavior)
    assert asyncio.run(handle(_Req(), _FakeContext())) == "answer"
    assert list(acc.drain()) == [(QuotaType.REQUEST, ANONYMOUS, "app")]  # its handler time counted
    refuse = through_pipeline(RequestPipeline(authorize=lambda ctx: False), "Metadata", behavior)
    ctx = _FakeContext()
    with pytest.raises(RuntimeError):
        asyncio.run(refuse(_Req(), ctx))
    assert ctx.aborted is not None


def test_fetch_read_time_reaches_the_callers_params(tmp_path: Any) -> None:
    """Request quotas and the fetch metrics read ``read_time_s`` from the params the server passed,
    not from the bounded copy the fetch reader reads with."""
    from services.broker.api.fetch import read
    from services.broker.replica_manager import ReplicaManager
    from services.broker.replica_results import FetchParams, FetchSpec
    from shared.types import TopicPartition

    async def run() -> FetchParams:
        params = FetchParams(replica_id=-1, max_wait_ms=0,
                             specs=[FetchSpec(TopicPartition("nope", 0), 0, 1024, -1)])
        await read(ReplicaManager(1, str(tmp_path)), params)
        return params

    assert asyncio.run(run()).read_time_s > 0
