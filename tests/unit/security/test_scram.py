"""SCRAM (RFC 5802 / 7677): RFC test vectors, round trips, and every refusal."""

from __future__ import annotations

import base64

import pytest

from shared.security.scram import (
    MAX_MESSAGE_BYTES,
    SCRAM_SHA_1_FOR_TESTS,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramAuthenticationError,
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    create_credential,
    escape_saslname,
    mechanism,
    parse_client_first,
    unescape_saslname,
)

# RFC 7677 section 3 (SCRAM-SHA-256) and RFC 5802 section 5 (SCRAM-SHA-1): user "user", password "pencil"
VECTORS = [
    pytest.param(
        SCRAM_SHA_256,
        "rOprNGfwEbeRWgbNEkqO",
        "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        "W22ZaJ0SNY7soEsUEjb6gQ==",
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
        id="rfc7677-sha256",
    ),
    pytest.param(
        SCRAM_SHA_1_FOR_TESTS,
        "fyko+d2lbbFgONRv9qkxdawL",
        "3rfcNHYJY1ZVvWVs7j",
        "QSXCR+Q6sek8bf92",
        "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
        "v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
        id="rfc5802-sha1",
    ),
]


@pytest.mark.parametrize("mech, cnonce, snonce, salt_b64, client_final, server_final", VECTORS)
def test_rfc_vectors_client_and_server(mech: ScramMechanism, cnonce: str, snonce: str, salt_b64: str,
                                       client_final: str, server_final: str) -> None:
    cred = create_credential("pencil", mech, 4096, base64.b64decode(salt_b64))
    server = ScramServer(mech, {"user": cred}.get, nonce_factory=lambda: snonce)
    client = ScramClient(mech, "user", "pencil", nonce=cnonce)

    first = client.first()
    assert first == f"n,,n=user,r={cnonce}".encode()
    server_first = server.client_first(first)
    assert server_first == f"r={cnonce}{snonce},s={salt_b64},i=4096".encode()
    final = client.final(server_first)
    assert final == client_final.encode()
    assert server.client_final(final) == server_final.encode()
    client.verify(server_final.encode())
    assert server.complete and server.username == "user"


def test_kafka_credential_string_round_trip() -> None:
    cred = create_credential("secret", SCRAM_SHA_512, 8192)
    text = cred.to_kafka_string()
    assert text.startswith("salt=") and ",stored_key=" in text and ",server_key=" in text
    assert text.endswith(",iterations=8192")
    assert "secret" not in text
    assert ScramCredential.from_kafka_string(text) == cred
    with pytest.raises(ValueError):
        ScramCredential.from_kafka_string("salt=AAAA,iterations=4096")


def test_credential_shape() -> None:
    c256 = create_credential("pw", SCRAM_SHA_256)
    c512 = create_credential("pw", SCRAM_SHA_512)
    assert len(c256.stored_key) == len(c256.server_key) == 32
    assert len(c512.stored_key) == len(c512.server_key) == 64
    assert c256.iterations == 4096 and len(c256.salt) == 32
    assert create_credential("pw", SCRAM_SHA_256).salt != c256.salt  # a fresh salt each time
    for bad in (4095, 16385):
        with pytest.raises(ValueError):
            create_credential("pw", SCRAM_SHA_256, bad)
    with pytest.raises(ValueError):
        create_credential("", SCRAM_SHA_256)


def test_mechanism_names() -> None:
    assert mechanism("scram-sha-512") is SCRAM_SHA_512
    assert mechanism("SCRAM-SHA-256") is SCRAM_SHA_256
    with pytest.raises(ValueError):
        mechanism("SCRAM-SHA-1")


def _exchange(mech: ScramMechanism, stored_pw: str, given_pw: str, user: str = "alice") -> ScramServer:
    cred = create_credential(stored_pw, mech)
    server = ScramServer(mech, {user: cred}.get)
    client = ScramClient(mech, user, given_pw)
    server_final = server.client_final(client.final(server.client_first(client.first())))
    client.verify(server_final)
    return server


@pytest.mark.parametrize("mech", [SCRAM_SHA_256, SCRAM_SHA_512], ids=lambda m: m.name)
def test_round_trip(mech: ScramMechanism) -> None:
    server = _exchange(mech, "correct horse", "correct horse")
    assert server.complete and server.username == "alice"


@pytest.mark.parametrize("mech", [SCRAM_SHA_256, SCRAM_SHA_512], ids=lambda m: m.name)
def test_wrong_password(mech: ScramMechanism) -> None:
    with pytest.raises(ScramAuthenticationError):
        _exchange(mech, "correct horse", "battery staple")


def test_unicode_and_escaped_user_names() -> None:
    server = _exchange(SCRAM_SHA_256, "pässwörd", "pässwörd", user="a,b=c")
    assert server.username == "a,b=c"


def test_unknown_user_fails_only_at_the_end_and_looks_like_a_known_one() -> None:
    mech = SCRAM_SHA_256
    lookup = {"alice": create_credential("pw", mech)}.get
    secret = b"s" * 32
    replies = []
    for _ in range(2):
        server = ScramServer(mech, lookup, unknown_user_secret=secret)
        client = ScramClient(mech, "mallory", "pw")
        server_first = server.client_first(client.first())  # no early refusal
        replies.append(server_first.split(b",s=")[1])
        with pytest.raises(ScramAuthenticationError):
            server.client_final(client.final(server_first))
    assert replies[0] == replies[1]  # same salt and iterations for the same unknown name


def _started(mech: ScramMechanism = SCRAM_SHA_256, cnonce: str = "clientnonce") -> tuple[ScramServer, ScramClient, bytes]:
    cred = create_credential("pw", mech)
    server = ScramServer(mech, {"alice": cred}.get)
    client = ScramClient(mech, "alice", "pw", nonce=cnonce)
    return server, client, server.client_first(client.first())


def test_tampered_nonce_in_client_final_is_refused() -> None:
    """CVE-2024-56128: a client-final whose nonce is not the server's combined nonce is refused, even
    with an otherwise valid proof computed over it."""
    server, client, server_first = _started()
    nonce = server_first.decode().split(",")[0][2:]
    forged_first = server_first.replace(nonce.encode(), (nonce + "X").encode())
    final = client.final(forged_first)  # a correct proof, but over a nonce the server never sent
    with pytest.raises(ScramAuthenticationError, match="nonce"):
        server.client_final(final)
    assert not server.complete


def test_client_final_with_only_the_client_nonce_is_refused() -> None:
    server, client, server_first = _started()
    final = client.final(server_first).decode()
    combined = server_first.decode().split(",")[0][2:]
    with pytest.raises(ScramAuthenticationError):
        server.client_final(final.replace(combined, "clientnonce").encode())


def test_replayed_client_final_fails_in_a_new_exchange() -> None:
    mech = SCRAM_SHA_256
    cred = create_credential("pw", mech)
    server1 = ScramServer(mech, {"alice": cred}.get)
    client = ScramClient(mech, "alice", "pw", nonce="samenonce")
    final = client.final(server1.client_first(client.first()))
    server1.client_final(final)
    # an eavesdropper replays the same client-first and client-final to a new exchange
    server2 = ScramServer(mech, {"alice": cred}.get)
    server2.client_first(b"n,,n=alice,r=samenonce")
    with pytest.raises(ScramAuthenticationError):
        server2.client_final(final)


def test_server_nonce_must_extend_client_nonce() -> None:
    client = ScramClient(SCRAM_SHA_256, "alice", "pw", nonce="abc")
    client.first()
    with pytest.raises(ScramAuthenticationError, match="nonce"):
        client.final(b"r=xyzabc123,s=QSXCR+Q6sek8bf92,i=4096")
    client = ScramClient(SCRAM_SHA_256, "alice", "pw", nonce="abc")
    client.first()
    with pytest.raises(ScramAuthenticationError, match="nonce"):
        client.final(b"r=abc,s=QSXCR+Q6sek8bf92,i=4096")  # nothing added by the server


@pytest.mark.parametrize("iterations", [1, 4095, 1_000_000])
def test_client_refuses_iteration_counts_outside_kafkas_bounds(iterations: int) -> None:
    client = ScramClient(SCRAM_SHA_256, "alice", "pw", nonce="abc")
    client.first()
    with pytest.raises(ScramAuthenticationError, match="iteration"):
        client.final(f"r=abcdef,s=QSXCR+Q6sek8bf92,i={iterations}".encode())


def test_client_refuses_bad_server_signature_and_server_error() -> None:
    server, client, server_first = _started()
    server.client_final(client.final(server_first))
    with pytest.raises(ScramAuthenticationError, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"\0" * 32))
    server, client, server_first = _started()
    client.final(server_first)
    with pytest.raises(ScramAuthenticationError, match="refused"):
        client.verify(b"e=invalid-proof")


@pytest.mark.parametrize("message, reason", [
    (b"p=tls-unique,,n=alice,r=abc", "channel binding"),
    (b"n,,m=ext,n=alice,r=abc", "mandatory extension"),
    (b"n,,n=alice,r=abc,m=ext", "extension"),
    (b"n,,n=alice,r=abc,x=1", "extension"),
    (b"n,,r=abc,n=alice", "n=...,r=..."),
    (b"n,,n=alice", "n=...,r=..."),
    (b"n,n=alice,r=abc", "gs2"),
    (b"x,,n=alice,r=abc", "channel binding"),
    (b"n,b=alice,n=alice,r=abc", "authzid"),
    (b"n,,n=al=ZZice,r=abc", "escape"),
    (b"n,,n=,r=abc", "empty"),
    (b"n,,n=alice,r=a,b", "malformed"),
    (b"n,,n=alice,r=", "nonce"),
    (b"n,,n=alice,r=ab\x7fc", "nonce"),
    (b"n,,n=alice,r=abc,", "malformed"),
    (b"n,,\xff\xfe", "UTF-8"),
    (b"n,,n=alice,r=" + b"a" * MAX_MESSAGE_BYTES, "larger"),
])
def test_malformed_client_first_is_refused(message: bytes, reason: str) -> None:
    server = ScramServer(SCRAM_SHA_256, lambda _u: None)
    with pytest.raises(ScramAuthenticationError, match=reason):
        server.client_first(message)
    with pytest.raises(ScramAuthenticationError, match="state"):  # a failed exchange stays failed
        server.client_first(b"n,,n=alice,r=abc")


def test_y_gs2_header_and_matching_authzid_accepted() -> None:
    first = parse_client_first(b"y,a=alice,n=alice,r=abc")
    assert first.gs2_header == "y,a=alice," and first.authzid == "alice" and first.username == "alice"
    assert parse_client_first(b"n,,n=a,r=b,t=1", frozenset({"t"})).extensions == {"t": "1"}
    mech = SCRAM_SHA_512
    server = ScramServer(mech, {"alice": create_credential("pw", mech)}.get)
    client = ScramClient(mech, "alice", "pw", authzid="alice")
    client.verify(server.client_final(client.final(server.client_first(client.first()))))


def test_authzid_other_than_user_is_refused() -> None:
    server = ScramServer(SCRAM_SHA_256, lambda _u: create_credential("pw", SCRAM_SHA_256))
    with pytest.raises(ScramAuthenticationError, match="authorization id"):
        server.client_first(b"n,a=admin,n=alice,r=abc")


def _final_parts(server_first: bytes, client: ScramClient) -> list[str]:
    return client.final(server_first).decode().split(",")


@pytest.mark.parametrize("mutate, reason", [
    (lambda p: [f"c={base64.b64encode(b'y,,').decode()}", *p[1:]], "channel binding"),
    (lambda p: ["c=eSws", *p[1:]], "channel binding"),
    (lambda p: [p[0], p[1], "x=1", p[2]], "extension"),
    (lambda p: [p[1], p[0], p[2]], "c=...,r="),
    (lambda p: p[:2], "c=...,r="),
    (lambda p: [p[0], p[1], "p=!!!"], "base64"),
    (lambda p: [p[0], p[1], "p=" + base64.b64encode(b"short").decode()], "length"),
    (lambda p: [p[0], p[1], "p=" + base64.b64encode(b"\0" * 32).decode()], "invalid credentials"),
])
def test_malformed_or_forged_client_final_is_refused(mutate, reason: str) -> None:  # type: ignore[no-untyped-def]
    server, client, server_first = _started()
    parts = mutate(_final_parts(server_first, client))
    with pytest.raises(ScramAuthenticationError, match=reason):
        server.client_final(",".join(parts).encode())
    assert not server.complete


def test_messages_out_of_order() -> None:
    server = ScramServer(SCRAM_SHA_256, lambda _u: None)
    with pytest.raises(ScramAuthenticationError, match="state"):
        server.client_final(b"c=biws,r=abc,p=AAAA")
    client = ScramClient(SCRAM_SHA_256, "a", "b")
    with pytest.raises(ScramAuthenticationError):
        client.final(b"r=x,s=AAAA,i=4096")
    client.first()
    with pytest.raises(ScramAuthenticationError):
        client.first()


@pytest.mark.parametrize("name, escaped", [("alice", "alice"), ("a,b", "a=2Cb"), ("a=b", "a=3Db"),
                                           ("=,", "=3D=2C")])
def test_saslname_escaping(name: str, escaped: str) -> None:
    assert escape_saslname(name) == escaped
    assert unescape_saslname(escaped) == name


@pytest.mark.parametrize("bad", ["a=2", "a=2c", "a,b", "=", ""])
def test_saslname_bad_escapes(bad: str) -> None:
    with pytest.raises(ScramAuthenticationError):
        unescape_saslname(bad)
