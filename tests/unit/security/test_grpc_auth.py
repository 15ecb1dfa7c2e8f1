"""gRPC user authentication (shared.security.grpc_auth): a real in-process grpc.aio server on 127.0.0.1
with the Sasl service and a guarded ``WhoAmI`` method that answers the principal its request context
got; the SCRAM users live in a small in-memory table with the store's ``credential()`` lookup."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

from shared import request_context
from shared.errors import ErrorCode
from shared.grpc_guard import GuardedServer
from shared.proto import security_pb2 as spb
from shared.proto import security_pb2_grpc as spb_grpc
from shared.quota.entities import ANONYMOUS
from shared.security import grpc_auth
from shared.security.auth_failures import AuthFailureTracker
from shared.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramAuthenticationError,
    ScramClient,
    ScramCredential,
    create_credential,
)

WHOAMI = "/test.Who/WhoAmI"


class Users:
    """The ``credential(user, mechanism)`` lookup of a SecurityStore, over a dict."""

    def __init__(self) -> None:
        self.creds: dict[tuple[str, str], ScramCredential] = {}

    def add(self, name: str, password: str, mech: Any = SCRAM_SHA_512) -> None:
        self.creds[(name, mech.name)] = create_credential(password, mech)

    def credential(self, username: str, mech: Any) -> ScramCredential | None:
        return self.creds.get((username, mech if isinstance(mech, str) else mech.name))


class Security:
    """The part of ServiceSecurity that ``attach`` reads."""

    enabled = True

    def __init__(self, store: Users) -> None:
        self.store = store

    def certificate_principal(self, context: Any) -> tuple[str, str | None]:
        return ANONYMOUS, None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _no_sleep(_s: float) -> None:
    return None


def _whoami_handler() -> grpc.GenericRpcHandler:
    def behavior(request: bytes, context: Any, ctx: request_context.RequestContext) -> bytes:
        return ctx.principal.encode()

    async def streaming(request: bytes, context: Any, ctx: request_context.RequestContext) -> Any:
        yield ctx.principal.encode()

    handlers = {"WhoAmI": grpc.unary_unary_rpc_method_handler(behavior),
                "WhoAmIStream": grpc.unary_stream_rpc_method_handler(streaming)}
    handlers = request_context.authorized_handlers(hand_context=True)(handlers)
    return grpc.method_handlers_generic_handler("test.Who", handlers)


Scenario = Callable[[grpc.aio.Channel, grpc_auth.GrpcAuthenticator, Clock], Awaitable[None]]


def run(scenario: Scenario, users: Users, **options: Any) -> None:
    async def main() -> None:
        clock = Clock()
        server = grpc.aio.server()
        guarded = GuardedServer(server)  # as shared.service.serve registers every servicer
        guarded.add_generic_rpc_handlers((_whoami_handler(),))
        auth = grpc_auth.attach(guarded, Security(users), clock=clock, sleep=_no_sleep, **options)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                await scenario(ch, auth, clock)
        finally:
            await server.stop(None)

    try:
        asyncio.run(main())
    finally:
        request_context.set_principal_resolver(request_context.anonymous)


async def whoami(ch: grpc.aio.Channel, token: str | None = None) -> str:
    md = (("authorization", f"Bearer {token}"),) if token is not None else None
    return (await ch.unary_unary(WHOAMI)(b"", metadata=md)).decode()


async def handshake(ch: grpc.aio.Channel, user: str, password: str,
                    mech: Any = SCRAM_SHA_512) -> tuple[spb.SaslAuthenticateResponse, spb.SaslAuthenticateResponse | None]:
    """Both rounds; the second is None when the first failed."""
    stub = spb_grpc.SaslStub(ch)
    client = ScramClient(mech, user, password)
    first = await stub.Authenticate(spb.SaslAuthenticateRequest(mechanism=mech.name, auth_bytes=client.first()))
    if first.error_code:
        return first, None
    final = client.final(first.auth_bytes)
    done = await stub.Authenticate(spb.SaslAuthenticateRequest(mechanism=mech.name, auth_bytes=final,
                                                               handshake_id=first.handshake_id))
    if done.error_code == 0:
        client.verify(done.auth_bytes)
    return first, done


def _users() -> Users:
    users = Users()
    users.add("alice", "alice-secret")
    users.add("bob", "bob-secret", SCRAM_SHA_256)
    return users


def test_good_password_opens_a_session_the_resolver_maps_to_the_user() -> None:
    async def scenario(ch: grpc.aio.Channel, auth: grpc_auth.GrpcAuthenticator, clock: Clock) -> None:
        assert await whoami(ch) == ANONYMOUS
        _first, done = await handshake(ch, "alice", "alice-secret")
        assert done is not None and done.error_code == 0
        assert done.session_token and done.session_lifetime_ms == 3_600_000
        assert await whoami(ch, done.session_token) == "alice"
        assert await whoami(ch) == ANONYMOUS  # no token, no user
        _first, bob = await handshake(ch, "bob", "bob-secret", SCRAM_SHA_256)
        assert bob is not None and await whoami(ch, bob.session_token) == "bob"
        assert auth.sessions == 2 and auth.pending == 0 and auth.authentications == 2

    run(scenario, _users())


def test_wrong_password_is_58_without_a_token_and_counted_per_host(tmp_path: Any) -> None:
    from shared.security import audit

    log = audit.configure(str(tmp_path / "audit.log"))

    async def scenario(ch: grpc.aio.Channel, auth: grpc_auth.GrpcAuthenticator, clock: Clock) -> None:
        for user, password in (("alice", "wrong"), ("nobody", "alice-secret")):
            first, done = await handshake(ch, user, password)
            assert first.error_code == 0 and first.handshake_id  # an unknown user looks like a known one
            assert done is not None and done.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED == 58
            assert not done.session_token and not done.auth_bytes
            assert "invalid credentials" in done.error_message
        assert auth.sessions == 0 and auth.failed_authentications == 2
        assert auth.failures.failures("127.0.0.1", clock()) == 2
        _first, ok = await handshake(ch, "alice", "alice-secret")  # a success forgets the host's failures
        assert ok is not None and ok.error_code == 0 and auth.failures.failures("127.0.0.1", clock()) == 0

    try:
        run(scenario, _users())
        assert log.flush()
        events = [json.loads(line) for line in (tmp_path / "audit.log").read_text().splitlines()]
    finally:
        audit.configure(None)
    assert [(e["kind"], e["principal"], e["host"], e["door"], e["operation"]) for e in events] == [
        ("authentication_failure", "User:alice", "127.0.0.1", "grpc", "SaslAuthenticate"),
        ("authentication_failure", "User:nobody", "127.0.0.1", "grpc", "SaslAuthenticate"),
    ]


def test_failures_past_the_free_ones_delay_the_answer() -> None:
    slept: list[float] = []

    async def record(s: float) -> None:
        slept.append(s)

    async def main() -> None:
        users = _users()
        clock = Clock()
        auth = grpc_auth.GrpcAuthenticator(users.credential, clock=clock, sleep=record,
                                           failures=AuthFailureTracker(free_failures=2, base_delay_s=0.5))
        for _ in range(3):
            client = ScramClient(SCRAM_SHA_512, "alice", "wrong")
            first = await auth.authenticate(spb.SaslAuthenticateRequest(mechanism="SCRAM-SHA-512",
                                                                        auth_bytes=client.first()), "10.0.0.9")
            done = await auth.authenticate(spb.SaslAuthenticateRequest(
                mechanism="SCRAM-SHA-512", auth_bytes=client.final(first.auth_bytes),
                handshake_id=first.handshake_id), "10.0.0.9")
            assert done.error_code == 58
        # the 2nd failure starts the delay (0.5 s), the 3rd doubles it; the 3rd attempt waited first
        assert slept == [0.5, 0.5, 1.0]

    asyncio.run(main())


def test_unknown_foreign_and_expired_tokens() -> None:
    async def scenario(ch: grpc.aio.Channel, auth: grpc_auth.GrpcAuthenticator, clock: Clock) -> None:
        _first, done = await handshake(ch, "alice", "alice-secret")
        assert done is not None
        token = done.session_token
        # a token this process never issued: UNAUTHENTICATED, so the client authenticates again
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await whoami(ch, "forged-" + token)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        stream = ch.unary_stream("/test.Who/WhoAmIStream")
        assert [r async for r in stream(b"", metadata=(("authorization", f"Bearer {token}"),))] == [b"alice"]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            [r async for r in stream(b"", metadata=(("authorization", "Bearer forged"),))]
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # the same token replayed from another host counts for nothing
        assert auth.principal_of(FakeCall("ipv4:10.1.2.3:4444", token)) == (ANONYMOUS, None)
        assert auth.principal_of(FakeCall("ipv4:127.0.0.1:4444", token)) == ("alice", None)
        with pytest.raises(grpc_auth.InvalidSession):
            auth.resolve(FakeCall("ipv4:10.1.2.3:4444", token))
        assert await whoami(ch, token) == "alice"
        # expired after the session lifetime
        clock.now += 3600
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await whoami(ch, token)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert auth.principal_of(FakeCall("ipv4:127.0.0.1:4444", token)) == (ANONYMOUS, None)
        assert auth.sessions == 0

    run(scenario, _users())


class FakeCall:
    """A servicer context's two methods the resolver reads (peer and metadata)."""

    def __init__(self, peer: str, token: str) -> None:
        self._peer = peer
        self._token = token
        self.code: grpc.StatusCode | None = None

    def peer(self) -> str:
        return self._peer

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", "Bearer " + self._token),)

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        pass


def test_client_final_must_carry_the_servers_combined_nonce() -> None:
    """CVE-2024-56128: a client-final whose nonce is not the one the server sent is refused, even with a
    proof computed over it."""

    async def scenario(ch: grpc.aio.Channel, auth: grpc_auth.GrpcAuthenticator, clock: Clock) -> None:
        stub = spb_grpc.SaslStub(ch)
        client = ScramClient(SCRAM_SHA_512, "alice", "alice-secret", nonce="clientnonce")
        first = await stub.Authenticate(spb.SaslAuthenticateRequest(mechanism="SCRAM-SHA-512", auth_bytes=client.first()))
        server_first = first.auth_bytes.decode()
        assert server_first.startswith("r=clientnonce") and len(server_first.split(",")[0]) > len("r=clientnonce")
        # the client answers a server-first whose nonce is only the client's own plus one char it made up
        forged = "r=clientnonceX," + ",".join(server_first.split(",")[1:])
        final = client.final(forged.encode())
        done = await stub.Authenticate(spb.SaslAuthenticateRequest(mechanism="SCRAM-SHA-512", auth_bytes=final,
                                                                   handshake_id=first.handshake_id))
        assert done.error_code == 58 and not done.session_token
        # the handshake is spent: its id cannot be used again
        again = await stub.Authenticate(spb.SaslAuthenticateRequest(mechanism="SCRAM-SHA-512", auth_bytes=final,
                                                                    handshake_id=first.handshake_id))
        assert again.error_code == 58

    run(scenario, _users())


def test_client_checks_the_server_nonce_extends_its_own() -> None:
    client = ScramClient(SCRAM_SHA_512, "alice", "pw", nonce="abc")
    client.first()
    salt = base64.b64encode(b"salt").decode()
    with pytest.raises(ScramAuthenticationError):
        client.final(f"r=zzzserver,s={salt},i=4096".encode())
    client = ScramClient(SCRAM_SHA_512, "alice", "pw", nonce="abc")
    client.first()
    with pytest.raises(ScramAuthenticationError):  # the bare client nonce, nothing of the server's
        client.final(f"r=abc,s={salt},i=4096".encode())


def test_unsupported_mechanism_malformed_and_stale_handshakes() -> None:
    async def scenario(ch: grpc.aio.Channel, auth: grpc_auth.GrpcAuthenticator, clock: Clock) -> None:
        stub = spb_grpc.SaslStub(ch)
        plain = await stub.Authenticate(spb.SaslAuthenticateRequest(mechanism="PLAIN", auth_bytes=b"\0a\0b"))
        assert plain.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM == 33
        assert list(plain.enabled_mechanisms) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        garbage = await stub.Authenticate(spb.SaslAuthenticateRequest(mechanism="SCRAM-SHA-512", auth_bytes=b"p=x,,n=a,r=b"))
        assert garbage.error_code == 58 and not garbage.handshake_id
        huge = await stub.Authenticate(spb.SaslAuthenticateRequest(mechanism="SCRAM-SHA-512", auth_bytes=b"x" * 5000))
        assert huge.error_code == 58
        # a handshake expires after 10 s
        client = ScramClient(SCRAM_SHA_512, "alice", "alice-secret")
        first = await stub.Authenticate(spb.SaslAuthenticateRequest(mechanism="SCRAM-SHA-512", auth_bytes=client.first()))
        clock.now += 10.5
        done = await stub.Authenticate(spb.SaslAuthenticateRequest(
            mechanism="SCRAM-SHA-512", auth_bytes=client.final(first.auth_bytes), handshake_id=first.handshake_id))
        assert done.error_code == 58 and auth.pending == 0
        # pending handshakes are bounded
        ids = []
        for _ in range(3):
            c = ScramClient(SCRAM_SHA_512, "alice", "alice-secret")
            r = await stub.Authenticate(spb.SaslAuthenticateRequest(mechanism="SCRAM-SHA-512", auth_bytes=c.first()))
            ids.append((r.error_code, bool(r.handshake_id)))
        assert ids == [(0, True), (0, True), (58, False)] and auth.pending == 2

    run(scenario, _users(), max_pending=2)


def test_pending_handshakes_are_bounded_per_host() -> None:
    async def main() -> None:
        auth = grpc_auth.GrpcAuthenticator(_users().credential, max_pending_per_host=2, sleep=_no_sleep)

        async def first(host: str) -> int:
            c = ScramClient(SCRAM_SHA_512, "alice", "alice-secret")
            r = await auth.authenticate(spb.SaslAuthenticateRequest(mechanism="SCRAM-SHA-512", auth_bytes=c.first()), host)
            return r.error_code

        assert [await first("10.0.0.1") for _ in range(3)] == [0, 0, 58]
        assert await first("10.0.0.2") == 0 and auth.pending == 3

    asyncio.run(main())


def test_session_table_is_bounded_oldest_out() -> None:
    async def scenario(ch: grpc.aio.Channel, auth: grpc_auth.GrpcAuthenticator, clock: Clock) -> None:
        tokens = []
        for _ in range(3):
            _first, done = await handshake(ch, "alice", "alice-secret")
            assert done is not None and done.error_code == 0
            tokens.append(done.session_token)
            clock.now += 1
        assert auth.sessions == 2
        with pytest.raises(grpc.aio.AioRpcError):
            await whoami(ch, tokens[0])
        assert [await whoami(ch, t) for t in tokens[1:]] == ["alice", "alice"]
        assert auth.revoke_user("alice") == 2 and auth.sessions == 0

    run(scenario, _users(), max_sessions=2)


def test_a_new_password_or_a_deleted_user_ends_the_session() -> None:
    users = _users()

    async def scenario(ch: grpc.aio.Channel, auth: grpc_auth.GrpcAuthenticator, clock: Clock) -> None:
        _f, alice = await handshake(ch, "alice", "alice-secret")
        _f, bob = await handshake(ch, "bob", "bob-secret", SCRAM_SHA_256)
        assert alice is not None and bob is not None
        users.add("alice", "new-secret")  # the store's cache follows etcd: a new credential
        del users.creds[("bob", SCRAM_SHA_256.name)]
        for token in (alice.session_token, bob.session_token):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await whoami(ch, token)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        _f, again = await handshake(ch, "alice", "new-secret")
        assert again is not None and await whoami(ch, again.session_token) == "alice"

    run(scenario, users)
