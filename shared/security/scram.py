"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677), sans I/O. (SASL/PLAIN: ``shared.security.plain``.)

Bytes in, bytes out: ``ScramServer`` and ``ScramClient`` are the two ends of one exchange
(client-first -> server-first -> client-final -> server-final); a transport (a gRPC handshake, the
Kafka listener's SaslAuthenticate, REST) carries their messages. Credentials are stored as Kafka
stores them (``ScramCredential``: salt, StoredKey, ServerKey, iterations; never the password), in
Kafka's text form ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``.

Rules enforced (a failed rule raises ``ScramAuthenticationError``; the transport answers
``SASL_AUTHENTICATION_FAILED`` (58) or HTTP 401 and never says which rule failed):

* gs2 header ``n,,`` or ``y,,`` only (no channel binding: ``p=`` is refused), an authzid equal to the
  user name if any; client-final's ``c=`` must be exactly that header, base64;
* the ``m=`` mandatory extension and every extension not in ``allowed_extensions`` are refused;
* the nonce in client-final must equal the combined nonce the server sent, whose head is the client's
  nonce (the check Kafka lacked: CVE-2024-56128);
* proofs and signatures compared with ``hmac.compare_digest``;
* iterations within Kafka's bounds [4096, 16384] on both ends; messages at most ``MAX_MESSAGE_BYTES``;
* an unknown user goes through the same steps with a made-up credential and fails only at the end,
  so the exchange does not reveal which users exist.

Passwords are UTF-8 encoded without SASLprep, as Kafka does.

Pure (``os.urandom`` / ``secrets`` are the defaults of injectable factories). Must not import
``services`` or ``pipelines``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

#: Kafka's bounds on the iteration count (``ScramMechanism.minIterations`` / ``maxIterations``).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
#: No SCRAM or PLAIN message of ours is anywhere near this; a peer that sends more is refused unread.
MAX_MESSAGE_BYTES = 4096
SALT_BYTES = 32


class SaslAuthenticationError(Exception):
    """Authentication failed (Kafka's ``SaslAuthenticationException``: ``SASL_AUTHENTICATION_FAILED``, 58;
    HTTP 401). ``str()`` is for logs; the peer is told only that authentication failed."""


class ScramAuthenticationError(SaslAuthenticationError):
    """A SCRAM exchange failed (bad proof, malformed or forbidden message, wrong state)."""


@dataclass(frozen=True)
class ScramMechanism:
    name: str  # the SASL mechanism name, e.g. "SCRAM-SHA-256"
    hash_name: str  # hashlib's name

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def h(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """``Hi(password, salt, i)`` of RFC 5802: PBKDF2 with HMAC of this hash."""
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode("utf-8"), salt, iterations)

    def client_key(self, salted: bytes) -> bytes:
        return self.hmac(salted, b"Client Key")

    def server_key(self, salted: bytes) -> bytes:
        return self.hmac(salted, b"Server Key")


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256")
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512")
#: The mechanisms Kafka (and Tidelog) offer, by SASL name.
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
#: RFC 5802's own examples use SHA-1; kept for the test vectors only, never offered.
SCRAM_SHA_1_FOR_TESTS = ScramMechanism("SCRAM-SHA-1", "sha1")


def mechanism(name: str) -> ScramMechanism:
    try:
        return MECHANISMS[name.upper()]
    except KeyError:
        raise ValueError(f"unsupported SASL mechanism {name!r} (supported: {', '.join(MECHANISMS)})") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise ScramAuthenticationError(f"{what} is not valid base64") from exc


# -- credentials ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScramCredential:
    """What the server keeps for a user: enough to verify a proof, not enough to make one."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka_string(self) -> str:
        """Kafka's ``ScramCredentialUtils.credentialToString`` form."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_kafka_string(cls, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(
                salt=base64.b64decode(fields["salt"], validate=True),
                stored_key=base64.b64decode(fields["stored_key"], validate=True),
                server_key=base64.b64decode(fields["server_key"], validate=True),
                iterations=int(fields["iterations"]),
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not a SCRAM credential: {exc}") from exc


def create_credential(
    password: str, mech: ScramMechanism, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """A new credential from a password (a random salt unless given). The password is not kept."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}], got {iterations}")
    if not password:
        raise ValueError("password must not be empty")
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    salted = mech.salted_password(password, salt, iterations)
    return ScramCredential(salt, mech.h(mech.client_key(salted)), mech.server_key(salted), iterations)


def verify_password(password: str, cred: ScramCredential, mech: ScramMechanism) -> bool:
    """Does ``password`` match the credential? For SASL/PLAIN and HTTP Basic, where the password
    itself arrives but only SCRAM credentials are stored: derive SaltedPassword with the stored salt
    and iteration count, then compare H(ClientKey) with StoredKey in constant time. Costs one PBKDF2
    (``iterations`` HMACs), as a SCRAM exchange does."""
    salted = mech.salted_password(password, cred.salt, cred.iterations)
    return hmac.compare_digest(mech.h(mech.client_key(salted)), cred.stored_key)


# -- message syntax -----------------------------------------------------------------------------------

# printable ASCII except ',' (RFC 5802 "printable")
_NONCE_RE = re.compile(r"^[\x21-\x2b\x2d-\x7e]+$")
_ATTR_RE = re.compile(r"^[A-Za-z]=")


def escape_saslname(name: str) -> str:
    """RFC 5802 saslname: ``=`` -> ``=3D``, ``,`` -> ``=2C``."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_saslname(value: str) -> str:
    out = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "=":
            code = value[i + 1:i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ScramAuthenticationError("invalid '=' escape in saslname")
            i += 3
        elif ch == ",":
            raise ScramAuthenticationError("unescaped ',' in saslname")
        else:
            out.append(ch)
            i += 1
    if not out:
        raise ScramAuthenticationError("empty user name")
    return "".join(out)


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    if not message:
        raise ScramAuthenticationError(f"empty {what}")
    out = []
    for part in message.split(","):
        if not _ATTR_RE.match(part):
            raise ScramAuthenticationError(f"malformed attribute in {what}")
        out.append((part[0], part[2:]))
    return out


def _decode(message: bytes, what: str) -> str:
    if len(message) > MAX_MESSAGE_BYTES:
        raise ScramAuthenticationError(f"{what} larger than {MAX_MESSAGE_BYTES} bytes")
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScramAuthenticationError(f"{what} is not UTF-8") from exc


def _check_nonce(nonce: str, what: str) -> str:
    if not _NONCE_RE.match(nonce):
        raise ScramAuthenticationError(f"invalid {what}")
    return nonce


@dataclass(frozen=True)
class ClientFirst:
    gs2_header: str  # e.g. "n,," — what client-final's c= must carry
    authzid: str | None
    username: str
    nonce: str
    extensions: dict[str, str]
    bare: str  # client-first-message-bare, part of the AuthMessage


def parse_client_first(message: bytes, allowed_extensions: frozenset[str] = frozenset()) -> ClientFirst:
    text = _decode(message, "client-first message")
    cbind, sep1, rest = text.partition(",")
    authz, sep2, bare = rest.partition(",")
    if not (sep1 and sep2):
        raise ScramAuthenticationError("malformed gs2 header")
    if cbind not in ("n", "y"):
        # "p=..." asks for channel binding, which Tidelog does not offer
        raise ScramAuthenticationError("channel binding is not supported")
    authzid = None
    if authz:
        if not authz.startswith("a="):
            raise ScramAuthenticationError("malformed authzid in gs2 header")
        authzid = unescape_saslname(authz[2:])
    attrs = _attributes(bare, "client-first message")
    if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
        if attrs and attrs[0][0] == "m":
            raise ScramAuthenticationError("mandatory extension (m=) is not supported")
        raise ScramAuthenticationError("client-first message must be n=...,r=...")
    username = unescape_saslname(attrs[0][1])
    nonce = _check_nonce(attrs[1][1], "client nonce")
    extensions: dict[str, str] = {}
    for key, value in attrs[2:]:
        if key == "m" or key not in allowed_extensions:
            raise ScramAuthenticationError(f"unsupported SCRAM extension {key!r}")
        extensions[key] = value
    return ClientFirst(f"{cbind},{authz},", authzid, username, nonce, extensions, bare)


# -- server ---------------------------------------------------------------------------------------------


class _State(Enum):
    RECEIVE_CLIENT_FIRST = "receive client-first"
    RECEIVE_CLIENT_FINAL = "receive client-final"
    COMPLETE = "complete"
    FAILED = "failed"


def _default_nonce() -> str:
    return secrets.token_urlsafe(24)  # 32 chars of [A-Za-z0-9_-]: printable, no ','


class ScramServer:
    """One server-side exchange. ``lookup(username)`` returns the user's credential or None.

    ``unknown_user_secret`` seeds the made-up salt of unknown users (so two exchanges for the same
    unknown name see the same salt, as for a real user); pass a per-process random value."""

    def __init__(
        self,
        mech: ScramMechanism,
        lookup: Callable[[str], ScramCredential | None],
        *,
        nonce_factory: Callable[[], str] = _default_nonce,
        allowed_extensions: frozenset[str] = frozenset(),
        unknown_user_secret: bytes | None = None,
    ) -> None:
        self.mech = mech
        self._lookup = lookup
        self._nonce_factory = nonce_factory
        self._allowed_extensions = allowed_extensions
        self._unknown_secret = unknown_user_secret if unknown_user_secret is not None else os.urandom(32)
        self._state = _State.RECEIVE_CLIENT_FIRST
        self._first: ClientFirst | None = None
        self._cred: ScramCredential | None = None
        self._known = False
        self._server_first = ""
        self._nonce = ""
        self.username: str | None = None  # set once the exchange completes
        self.extensions: dict[str, str] = {}

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    def _fail(self, reason: str) -> ScramAuthenticationError:
        self._state = _State.FAILED
        return ScramAuthenticationError(reason)

    def client_first(self, message: bytes) -> bytes:
        """client-first -> server-first."""
        if self._state is not _State.RECEIVE_CLIENT_FIRST:
            raise self._fail(f"client-first received in state {self._state.value}")
        try:
            first = parse_client_first(message, self._allowed_extensions)
        except ScramAuthenticationError:
            self._state = _State.FAILED
            raise
        if first.authzid is not None and first.authzid != first.username:
            raise self._fail("authorization id differs from the user name")
        cred = self._lookup(first.username)
        self._known = cred is not None
        if cred is None:
            cred = self._made_up_credential(first.username)
        server_nonce = _check_nonce(self._nonce_factory(), "server nonce")
        self._first, self._cred = first, cred
        self._nonce = first.nonce + server_nonce
        self._server_first = f"r={self._nonce},s={_b64(cred.salt)},i={cred.iterations}"
        self._state = _State.RECEIVE_CLIENT_FINAL
        return self._server_first.encode()

    def client_final(self, message: bytes) -> bytes:
        """client-final -> server-final (``v=<ServerSignature>``); raises if the proof is wrong."""
        if self._state is not _State.RECEIVE_CLIENT_FINAL:
            raise self._fail(f"client-final received in state {self._state.value}")
        assert self._first is not None and self._cred is not None
        try:
            text = _decode(message, "client-final message")
            attrs = _attributes(text, "client-final message")
        except ScramAuthenticationError:
            self._state = _State.FAILED
            raise
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise self._fail("client-final message must be c=...,r=...[,ext]*,p=...")
        if attrs[2:-1]:
            raise self._fail("unsupported extension in client-final message")
        cbind = _unb64(attrs[0][1], "channel binding")
        if not hmac.compare_digest(cbind, self._first.gs2_header.encode()):
            raise self._fail("channel binding does not match the gs2 header")
        # CVE-2024-56128: the nonce must be the one this server sent, not merely present
        if not hmac.compare_digest(attrs[1][1].encode(), self._nonce.encode()):
            raise self._fail("nonce does not match the server's combined nonce")
        proof = _unb64(attrs[-1][1], "proof")
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._first.bare},{self._server_first},{without_proof}".encode()
        mech, cred = self.mech, self._cred
        client_signature = mech.hmac(cred.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise self._fail("proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        ok = hmac.compare_digest(mech.h(client_key), cred.stored_key)
        if not ok or not self._known:
            raise self._fail("invalid credentials")
        self._state = _State.COMPLETE
        self.username = self._first.username
        self.extensions = dict(self._first.extensions)
        return f"v={_b64(mech.hmac(cred.server_key, auth_message))}".encode()

    def _made_up_credential(self, username: str) -> ScramCredential:
        """A credential no password matches, stable per (secret, name): unknown users look like known ones."""
        seed = hmac.new(self._unknown_secret, username.encode(), hashlib.sha256).digest()
        key = self.mech.hmac(seed, b"stored")
        return ScramCredential(seed, key, self.mech.hmac(seed, b"server"), DEFAULT_ITERATIONS)


# -- client ----------------------------------------------------------------------------------------------


class ScramClient:
    """One client-side exchange: ``first()``, ``final(server_first)``, ``verify(server_final)``."""

    def __init__(self, mech: ScramMechanism, username: str, password: str, *,
                 nonce: str | None = None, authzid: str | None = None) -> None:
        self.mech = mech
        self.username = username
        self._password = password
        self._nonce = _check_nonce(nonce if nonce is not None else _default_nonce(), "client nonce")
        authz = f"a={escape_saslname(authzid)}" if authzid else ""
        self._gs2 = f"n,{authz},"
        self._bare = f"n={escape_saslname(username)},r={self._nonce}"
        self._auth_message = b""
        self._salted = b""
        self._step = 0

    def first(self) -> bytes:
        if self._step != 0:
            raise ScramAuthenticationError("client-first already sent")
        self._step = 1
        return (self._gs2 + self._bare).encode()

    def final(self, server_first: bytes) -> bytes:
        if self._step != 1:
            raise ScramAuthenticationError("server-first out of order")
        self._step = 2
        text = _decode(server_first, "server-first message")
        attrs = _attributes(text, "server-first message")
        if attrs and attrs[0][0] == "m":
            raise ScramAuthenticationError("mandatory extension (m=) is not supported")
        if len(attrs) < 3 or [k for k, _ in attrs[:3]] != ["r", "s", "i"]:
            raise ScramAuthenticationError("server-first message must be r=...,s=...,i=...")
        nonce = _check_nonce(attrs[0][1], "server nonce")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramAuthenticationError("server nonce does not extend the client nonce")
        salt = _unb64(attrs[1][1], "salt")
        try:
            iterations = int(attrs[2][1])
        except ValueError as exc:
            raise ScramAuthenticationError("iteration count is not a number") from exc
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ScramAuthenticationError(f"iteration count {iterations} outside [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
        self._salted = self.mech.salted_password(self._password, salt, iterations)
        without_proof = f"c={_b64(self._gs2.encode())},r={nonce}"
        self._auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = self.mech.client_key(self._salted)
        signature = self.mech.hmac(self.mech.h(client_key), self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        """Check the server's signature (it knew the ServerKey); raises if not."""
        if self._step != 2:
            raise ScramAuthenticationError("server-final out of order")
        self._step = 3
        text = _decode(server_final, "server-final message")
        attrs = _attributes(text, "server-final message")
        if attrs[0][0] == "e":
            raise ScramAuthenticationError(f"server refused: {attrs[0][1]}")
        if attrs[0][0] != "v":
            raise ScramAuthenticationError("server-final message must be v=...")
        expected = self.mech.hmac(self.mech.server_key(self._salted), self._auth_message)
        if not hmac.compare_digest(_unb64(attrs[0][1], "server signature"), expected):
            raise ScramAuthenticationError("server signature does not match")
