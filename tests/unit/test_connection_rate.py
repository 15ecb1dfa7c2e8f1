"""connection_creation_rate (issue 23, item 6): the per-host token bucket and the gRPC gate with a fake
clock; the gRPC wiring (``shared.request_context``, ``Sasl.Authenticate``) with a real in-process gRPC
server; the Kafka listener's delayed close with real sockets; the setting's defaults."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from shared import request_context
from shared.grpc_guard import GuardedServer
from shared.request_context import ConnectionThrottled, resolve_principal, set_connection_gate
from shared.security.connection_rate import (
    SECURE_DEFAULT_RATE,
    ConnectionRateLimiter,
    GrpcConnectionGate,
    is_unlimited,
)
from shared.settings import ServiceSettings

H = "10.0.0.1"


# -- the limiter --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0, -1, math.inf, None])
def test_unlimited_admits_everything_and_keeps_nothing(rate: float | None) -> None:
    limiter = ConnectionRateLimiter(rate)
    assert limiter.unlimited and is_unlimited(rate)
    assert all(limiter.admit(H, 0.0) == 0.0 for _ in range(10_000))
    assert limiter.hosts == 0 and limiter.refused == 0 and limiter.describe() == "unlimited"


def test_a_burst_then_the_rate_and_the_wait_until_the_next_token() -> None:
    limiter = ConnectionRateLimiter(5, burst=5)
    assert [limiter.admit(H, 0.0) for _ in range(5)] == [0.0] * 5
    assert limiter.admit(H, 0.0) == pytest.approx(0.2)  # one token comes back every 1/5 s
    assert limiter.admit(H, 0.1) == pytest.approx(0.1)
    assert limiter.admit(H, 0.2) == 0.0  # a refusal spent nothing: the token is there on time
    assert limiter.admit(H, 0.2) == pytest.approx(0.2)
    assert limiter.refused == 3
    assert [limiter.admit(H, 100.0) for _ in range(6)][-2:] == [0.0, pytest.approx(0.2)]  # refilled to burst only


def test_hosts_are_counted_apart_and_burst_defaults_to_one_second() -> None:
    limiter = ConnectionRateLimiter(2)
    assert limiter.burst == 2
    assert [limiter.admit("a", 0.0) for _ in range(3)] == [0.0, 0.0, pytest.approx(0.5)]
    assert limiter.admit("b", 0.0) == 0.0
    assert ConnectionRateLimiter(0.5).burst == 1  # at least one connection


def test_at_most_max_hosts_are_kept_the_least_recent_forgotten() -> None:
    limiter = ConnectionRateLimiter(1, burst=1, max_hosts=3)
    for host in ("a", "b", "c"):
        limiter.admit(host, 0.0)
    assert limiter.admit("a", 0.0) > 0  # "a" is now the most recent
    limiter.admit("d", 0.0)  # "b" goes
    assert limiter.hosts == 3
    assert limiter.admit("b", 0.0) == 0.0  # forgotten: a full bucket again
    assert limiter.admit("a", 0.0) > 0


def test_a_refused_host_is_logged_once_per_ten_seconds() -> None:
    limiter = ConnectionRateLimiter(1)
    assert limiter.should_log(H, 0.0) and not limiter.should_log(H, 9.9) and limiter.should_log(H, 10.0)
    assert limiter.should_log("other", 1.0)


# -- the gRPC gate ------------------------------------------------------------------------------------------


def _gate(rate: float = 2, *, idle_s: float = 60.0, max_peers: int = 100) -> GrpcConnectionGate:
    return GrpcConnectionGate(ConnectionRateLimiter(rate), idle_s=idle_s, max_peers=max_peers, now=0.0)


def test_admitted_peers_are_remembered_refused_ones_are_not() -> None:
    gate = _gate(2)
    assert gate.admit("ipv4:10.0.0.1:1", 0.0) == 0.0 and gate.admit("ipv4:10.0.0.1:2", 0.0) == 0.0
    assert gate.admit("ipv4:10.0.0.1:3", 0.0) == pytest.approx(0.5)
    assert "ipv4:10.0.0.1:1" in gate.admitted and "ipv4:10.0.0.1:3" not in gate.admitted
    assert all(gate.admit("ipv4:10.0.0.1:1", 0.0) == 0.0 for _ in range(100))  # established: no token spent
    assert gate.admit("ipv4:10.0.0.2:1", 0.0) == 0.0  # another host
    assert gate.admit("ipv4:10.0.0.1:3", 0.5) == 0.0  # the refused connection's next call, once a token is back
    assert gate.limiter.refused == 1


def test_trusted_connections_do_not_count() -> None:
    gate = _gate(1)
    assert gate.admit("ipv4:10.0.0.1:1", 0.0) == 0.0
    assert gate.admit("ipv4:10.0.0.1:2", 0.0, trusted=True) == 0.0
    assert gate.admit("ipv4:10.0.0.1:3", 0.0) > 0


def test_idle_peers_are_forgotten_active_ones_carried_over() -> None:
    gate = _gate(1000, idle_s=10.0)
    gate.admit("ipv4:1.1.1.1:1", 0.0)
    gate.admit("ipv4:1.1.1.1:2", 0.0)
    gate.admit("ipv4:1.1.1.1:9", 10.0)  # a miss after idle_s: a new generation
    assert "ipv4:1.1.1.1:1" not in gate.admitted
    assert gate.admit("ipv4:1.1.1.1:1", 12.0) == 0.0 and "ipv4:1.1.1.1:1" in gate.admitted  # carried over
    gate.admit("ipv4:1.1.1.1:8", 20.0)  # the next generation: :2 was idle for two
    assert gate.peers == 3  # :1 and :9 (previous generation) and :8
    before = gate.limiter.refused, dict(gate.limiter._hosts)
    gate.admit("ipv4:1.1.1.1:2", 20.0)  # forgotten: asks the limiter again
    assert dict(gate.limiter._hosts) != before[1]
    gate.admit("ipv4:1.1.1.1:7", 100.0)  # idle for two generations at once: everything forgotten
    assert gate.peers == 1


def test_remembered_peers_are_bounded() -> None:
    gate = _gate(math.inf, max_peers=10)  # the bound holds even with an unlimited limiter
    for port in range(1000):
        gate.admit(f"ipv4:1.1.1.1:{port}", 0.0)
    assert gate.peers <= 10


# -- the gRPC wiring ----------------------------------------------------------------------------------------


@pytest.fixture
def gate() -> Iterator[GrpcConnectionGate]:
    g = GrpcConnectionGate(ConnectionRateLimiter(2, burst=2), now=time.monotonic())
    set_connection_gate(g)
    yield g
    set_connection_gate(None)


class FakeContext:
    def __init__(self, peer: str, certificate: bool = False) -> None:
        self._peer = peer
        self.certificate = certificate
        self.code: Any = None
        self.details = ""

    def peer(self) -> str:
        return self._peer

    def auth_context(self) -> dict[str, list[bytes]]:
        return {"x509_subject": [b"CN=broker-1,OU=tidelog-service"]} if self.certificate else {}

    def set_code(self, code: Any) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    async def abort(self, code: Any, details: str) -> None:
        self.code, self.details = code, details
        raise grpc.RpcError(details)


def test_resolve_principal_refuses_a_new_connection_over_the_rate(gate: GrpcConnectionGate) -> None:
    assert resolve_principal(FakeContext("ipv4:127.0.0.1:1"))[0] == "ANONYMOUS"
    assert resolve_principal(FakeContext("ipv4:127.0.0.1:2"))[0] == "ANONYMOUS"
    refused = FakeContext("ipv4:127.0.0.1:3")
    with pytest.raises(ConnectionThrottled, match="connection_creation_rate"):
        resolve_principal(refused)
    assert refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "127.0.0.1" in refused.details
    assert resolve_principal(FakeContext("ipv4:127.0.0.1:1"))[0] == "ANONYMOUS"  # established ones keep working
    assert resolve_principal(FakeContext("ipv4:127.0.0.1:4", certificate=True))[0] == "ANONYMOUS"  # a certificate


def test_without_a_gate_nothing_is_checked() -> None:
    set_connection_gate(None)
    assert all(request_context.connection_refusal(FakeContext(f"ipv4:127.0.0.1:{p}")) is None for p in range(100))


def test_every_guarded_method_refuses_with_resource_exhausted(gate: GrpcConnectionGate) -> None:
    from shared.grpc_codecs import RewrittenHandlers
    from shared.proto import tidelog_pb2_grpc as pb_grpc
    from tests.unit.handler_recorder import HandlerRecorder

    class Servicer:
        def __getattr__(self, name: str) -> Any:
            async def method(request: Any, context: Any) -> str:
                return name
            return method

    recorder = HandlerRecorder()
    pb_grpc.add_ControllerServicer_to_server(
        Servicer(), RewrittenHandlers(recorder, request_context.authorized_handlers()))
    gate.admit("ipv4:127.0.0.1:1", time.monotonic())
    gate.admit("ipv4:127.0.0.1:2", time.monotonic())
    for i, (name, h) in enumerate(recorder.handlers.items()):
        context = FakeContext(f"ipv4:127.0.0.1:{100 + i}")
        behavior = h.unary_unary or h.unary_stream or h.stream_unary or h.stream_stream

        async def call(behavior: Any = behavior, context: FakeContext = context) -> Any:
            out = behavior(object(), context)
            return [x async for x in out] if hasattr(out, "__aiter__") else await out

        with pytest.raises(grpc.RpcError):
            asyncio.run(call())
        assert context.code == grpc.StatusCode.RESOURCE_EXHAUSTED, name
        assert "connection_creation_rate" in context.details


def test_real_grpc_connections_and_sasl_authenticate(gate: GrpcConnectionGate) -> None:
    """A real grpc.aio server: the third new connection is refused RESOURCE_EXHAUSTED, on a method that
    resolves its principal and on Sasl.Authenticate (which does not); the first connection keeps working."""
    from shared.proto import security_pb2 as spb
    from shared.security.grpc_auth import GrpcAuthenticator, SaslServicer

    async def run() -> None:
        server = grpc.aio.server()

        async def echo(request: bytes, context: Any) -> bytes:
            resolve_principal(context)
            return request

        guarded: Any = GuardedServer(server)
        guarded.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "t.T", {"Echo": grpc.unary_unary_rpc_method_handler(echo)}),))
        from shared.proto import security_pb2_grpc as spb_grpc
        spb_grpc.add_SaslServicer_to_server(SaslServicer(GrpcAuthenticator(lambda user, mech: None)), guarded)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        own = [("grpc.use_local_subchannel_pool", 1)]  # one TCP connection per channel
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=own) for _ in range(4)]
        try:
            assert await channels[0].unary_unary("/t.T/Echo")(b"a") == b"a"
            assert await channels[1].unary_unary("/t.T/Echo")(b"b") == b"b"
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await channels[2].unary_unary("/t.T/Echo")(b"c")
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "connection_creation_rate" in (refused.value.details() or "")
            sasl = channels[3].unary_unary("/tidelog.security.v1.Sasl/Authenticate",
                                           request_serializer=spb.SaslAuthenticateRequest.SerializeToString,
                                           response_deserializer=spb.SaslAuthenticateResponse.FromString)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await sasl(spb.SaslAuthenticateRequest(mechanism="SCRAM-SHA-256", auth_bytes=b"n,,n=u,r=x"))
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert all([await channels[0].unary_unary("/t.T/Echo")(b"a") == b"a" for _ in range(20)])
        finally:
            for ch in channels:
                await ch.close()
            await server.stop(0)

    asyncio.run(run())


# -- the Kafka listener -------------------------------------------------------------------------------------


class _NoApis:
    pipeline: Any = None

    async def close(self) -> None:
        return None


def test_kafka_listener_holds_then_closes_a_connection_over_the_rate(caplog: pytest.LogCaptureFixture) -> None:
    from services.broker.kafka.listener import KafkaListener

    async def run() -> None:
        listener = KafkaListener(_NoApis(), connection_creation_rate=2)  # type: ignore[arg-type]
        port = await listener.start("127.0.0.1", 0)
        try:
            kept = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            # Kafka's delayed close: the connection is accepted, never read, and closed after its throttle time
            assert await asyncio.wait_for(reader.read(1), 5) == b""
            writer.close()
            assert listener.throttled_connections >= 1 and listener.connection_count == 2
            for r, _ in kept:  # the admitted ones are still open
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(r.read(1), 0.05)
            for _, w in kept:
                w.close()
        finally:
            await listener.stop()

    with caplog.at_level("WARNING"):
        asyncio.run(run())
    assert sum("connection_creation_rate" in r.getMessage() for r in caplog.records) == 1


def test_kafka_listener_unlimited_by_default() -> None:
    from services.broker.kafka.listener import KafkaListener

    listener = KafkaListener(_NoApis())  # type: ignore[arg-type]
    assert listener.connection_rate.unlimited


# -- the setting --------------------------------------------------------------------------------------------


def test_the_setting_defaults_unlimited_plaintext_and_generous_secure(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.broker.main import BrokerSettings
    from shared.service import connection_creation_rate

    monkeypatch.delenv("TIDELOG_CONNECTION_CREATION_RATE", raising=False)
    assert connection_creation_rate(ServiceSettings()) == 0.0
    assert connection_creation_rate(BrokerSettings()) == 0.0
    secure = {"security_protocol": "SSL", "ssl_cafile": "ca", "ssl_certfile": "c", "ssl_keyfile": "k"}
    assert connection_creation_rate(ServiceSettings(**secure)) == SECURE_DEFAULT_RATE
    assert connection_creation_rate(BrokerSettings(**secure)) == SECURE_DEFAULT_RATE
    monkeypatch.setenv("TIDELOG_CONNECTION_CREATION_RATE", "5")
    assert connection_creation_rate(ServiceSettings()) == 5.0  # every service reads it
    assert connection_creation_rate(BrokerSettings()) == 5.0
    monkeypatch.setenv("TIDELOG_CONNECTION_CREATION_RATE", "0")
    assert connection_creation_rate(BrokerSettings(**secure)) == 0.0  # 0: unlimited, even when secure
