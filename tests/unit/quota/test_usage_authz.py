"""Usage reports only from brokers, each only as itself (issue 23: three ReportUsage streams claiming to be
brokers 1-3 throttled a victim client for hours). The rule on its own with a real ``Authorizer``, then the
QuotaService on an in-process gRPC server behind ``services.quota.authz.add_to_server``, where the caller's
certificate subject comes from the principal resolver (a test resolver reading it from the metadata)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from services.quota.authz import add_to_server, describe_refusal, report_refusal
from services.quota.decider import QuotaDecider
from services.quota.main import QuotaServicer
from shared import request_context
from shared.proto import quota_pb2 as qpb
from shared.proto import quota_pb2_grpc as qpb_grpc
from shared.quota.entities import ANONYMOUS, PRODUCER_BYTE_RATE, QuotaEntity, QuotaType
from shared.request_context import RequestContext
from shared.security.access import Access
from shared.security.acl import CLUSTER_NAME, acl
from shared.security.authorizer import Authorizer

BROKER_1 = "CN=broker-1,OU=tidelog-service"
CLEANER_1 = "CN=cleaner-1,OU=tidelog-service"


def security() -> SimpleNamespace:
    auth = Authorizer([acl(f"User:{CLEANER_1}", "CLUSTER_ACTION", "CLUSTER", CLUSTER_NAME)],
                      super_users=f"User:admin;User:{BROKER_1}")
    return SimpleNamespace(enabled=True, authorizer=auth, tls=None)


def ctx(principal: str, subject: str | None = None) -> RequestContext:
    return RequestContext("ReportUsage", "", principal, "ipv4:10.0.0.5:1", 0.0, "10.0.0.5", subject)


def test_the_rule() -> None:
    access = Access(security())
    assert report_refusal(None, ctx(ANONYMOUS), 1) is None  # plaintext: as before
    assert report_refusal(access, ctx(BROKER_1, BROKER_1), 1) is None
    assert "may not report usage as broker 2" in (report_refusal(access, ctx(BROKER_1, BROKER_1), 2) or "")
    for who in (ctx("admin"), ctx("mallory"), ctx(CLEANER_1, CLEANER_1)):  # a user, even a super user; a cleaner
        assert (report_refusal(access, who, 1) or "").startswith("CLUSTER_AUTHORIZATION_FAILED")
    assert describe_refusal(access, ctx("admin")) is None
    assert (describe_refusal(access, ctx("mallory")) or "").startswith("CLUSTER_AUTHORIZATION_FAILED")


class _Instance:
    def __init__(self) -> None:
        self.decider = QuotaDecider()
        self.decider.set_configs({QuotaEntity(None, "victim"): {PRODUCER_BYTE_RATE: 1000.0}})
        self.active = True
        self.instance = "q1"


def _subject_from_metadata(context: Any) -> tuple[str, str | None]:
    subject = dict(context.invocation_metadata()).get("x-test-subject")
    return (subject, subject) if subject else (ANONYMOUS, None)


@pytest.fixture
def resolver() -> Any:
    request_context.set_principal_resolver(_subject_from_metadata)
    yield
    request_context.set_principal_resolver(request_context.anonymous)


def _report(broker: int) -> qpb.UsageReport:
    return qpb.UsageReport(broker_id=broker, sequence=1, usage=[
        qpb.Usage(quota_type=QuotaType.PRODUCE, user=ANONYMOUS, client_id="victim", amount=10_000_000.0)])


@pytest.mark.usefixtures("resolver")
def test_forged_reports_are_refused_on_the_wire() -> None:
    async def scenario() -> None:
        _instance = _Instance()
        sec = security()
        server = grpc.aio.server()
        add_to_server(QuotaServicer(_instance), server, lambda: sec)  # type: ignore[arg-type]
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                stub = qpb_grpc.QuotaServiceStub(ch)

                async def stream(subject: str | None, broker: int) -> Any:
                    metadata = (("x-test-subject", subject),) if subject else ()
                    call = stub.ReportUsage(iter([_report(broker)]), metadata=metadata)
                    return [r async for r in call]

                got = await stream(BROKER_1, 1)
                assert got[0].decisions and got[0].decisions[0].client_id == "victim"
                for subject, broker in ((None, 1), (BROKER_1, 2), (CLEANER_1, 1)):
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await stream(subject, broker)
                    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
                    assert refused.value.details().startswith("CLUSTER_AUTHORIZATION_FAILED")
                with pytest.raises(grpc.aio.AioRpcError) as described:
                    await stub.DescribeUsage(qpb.DescribeUsageRequest())
                assert described.value.code() == grpc.StatusCode.PERMISSION_DENIED
                usage = await stub.DescribeUsage(qpb.DescribeUsageRequest(), metadata=(("x-test-subject", BROKER_1),))
                assert {t.broker_id for t in usage.totals} == {1}  # only the genuine broker's report was counted
        finally:
            await server.stop(None)

    asyncio.run(scenario())


def test_plaintext_streams_as_before() -> None:
    async def scenario() -> None:
        server = grpc.aio.server()
        add_to_server(QuotaServicer(_Instance()), server)  # type: ignore[arg-type]
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                stub = qpb_grpc.QuotaServiceStub(ch)
                got = [r async for r in stub.ReportUsage(iter([_report(2), _report(3)]))]
                assert len(got) == 2
                assert (await stub.DescribeUsage(qpb.DescribeUsageRequest())).active
        finally:
            await server.stop(None)

    asyncio.run(scenario())
