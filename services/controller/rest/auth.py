"""REST authentication when security is on (issue 23): HTTP Basic over TLS, the SCRAM users' passwords
(as Redpanda's Admin API). Plaintext asks for nothing (everyone is ANONYMOUS, as before).

The password is checked against the user's stored SCRAM credential (``SecurityStore.credential``:
salt, iterations, StoredKey; never the password) with ``scram.verify_password``: one PBKDF2, run in a
worker thread so the event loop keeps serving. A success is remembered for ``ttl_s`` (5 minutes) under
an HMAC of (user, password) with a per-process random key, together with the credential it was checked
against: the next requests with the same header cost one HMAC and a dict lookup, and a password change
or a deleted user takes effect at once (the remembered credential no longer equals the stored one).
An unknown user costs the same PBKDF2 as a known one (a made-up credential), so timing does not tell
which users exist. Comparisons are constant-time (``hmac.compare_digest`` in ``verify_password``).

Failures are counted and slowed per host (``AuthFailureTracker``: after a few free failures a host is
refused without a check for a growing delay, answered with ``Retry-After``), logged and audited
(``authentication_failure``). Every refusal is 401 with ``WWW-Authenticate: Basic``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException

from shared.security.auth_failures import AuthFailureTracker
from shared.security.scram import (
    DEFAULT_ITERATIONS,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    ScramMechanism,
    create_credential,
    verify_password,
)

log = logging.getLogger(__name__)

CHALLENGE = {"WWW-Authenticate": 'Basic realm="tidelog", charset="UTF-8"'}
#: longest Authorization header value looked at (a user name and a password, base64)
MAX_HEADER = 4096


class Unauthorized(HTTPException):
    def __init__(self, message: str, retry_after_s: float = 0.0) -> None:
        headers = dict(CHALLENGE)
        if retry_after_s > 0:
            headers["Retry-After"] = str(max(1, round(retry_after_s)))
        super().__init__(status_code=401, detail=message, headers=headers)


_DUMMY: list[ScramCredential] = []


def _dummy() -> ScramCredential:
    """A credential no password matches in practice, to spend an unknown user's PBKDF2 on."""
    if not _DUMMY:
        _DUMMY.append(create_credential(base64.b64encode(os.urandom(24)).decode(), SCRAM_SHA_512,
                                        DEFAULT_ITERATIONS))
    return _DUMMY[0]


def parse_basic(header: str) -> tuple[str, str]:
    """``Basic base64(user:password)`` -> (user, password); raises ``Unauthorized``."""
    if len(header) > MAX_HEADER:
        raise Unauthorized("the Authorization header is too long")
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        raise Unauthorized("use HTTP Basic authentication (a SCRAM user and its password)")
    try:
        text = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise Unauthorized("malformed Basic credentials") from None
    user, sep, password = text.partition(":")
    if not sep or not user or not password:
        raise Unauthorized("malformed Basic credentials")
    return user, password


class BasicAuthenticator:
    def __init__(self, *, ttl_s: float = 300.0, max_entries: int = 10_000,
                 tracker: AuthFailureTracker | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.tracker = tracker if tracker is not None else AuthFailureTracker()  # (an empty tracker is falsy)
        self.clock = clock
        self._key = os.urandom(32)
        # HMAC(user, password) -> (expiry, user, mechanism, credential checked)
        self._cache: dict[bytes, tuple[float, str, ScramMechanism, ScramCredential]] = {}
        self.verifications = 0  # PBKDF2 runs (tests and metrics)

    def _digest(self, user: str, password: str) -> bytes:
        return hmac.new(self._key, user.encode() + b"\x00" + password.encode(), hashlib.sha256).digest()

    @staticmethod
    def _credential(lookup: Callable[[str, Any], ScramCredential | None],
                    user: str) -> tuple[ScramMechanism, ScramCredential | None]:
        for mech in (SCRAM_SHA_512, SCRAM_SHA_256):
            cred = lookup(user, mech)
            if cred is not None:
                return mech, cred
        return SCRAM_SHA_512, None

    async def authenticate(self, header: str | None, host: str,
                           lookup: Callable[[str, Any], ScramCredential | None]) -> str:
        """The user name of a valid ``Authorization`` header; raises ``Unauthorized`` (401)."""
        if not header:
            raise Unauthorized("authentication required: HTTP Basic with a SCRAM user and its password")
        user, password = parse_basic(header)
        now = self.clock()
        key = self._digest(user, password)
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now and hit[1] == user and lookup(user, hit[2]) == hit[3]:
            return user
        delay = self.tracker.delay_s(host, now)
        if delay > 0:
            self._failed(user, host, "too many failed attempts from this host")
            raise Unauthorized(f"too many failed attempts from {host}; retry in {delay:.1f} s", delay)
        mech, cred = self._credential(lookup, user)
        self.verifications += 1
        ok = await asyncio.to_thread(verify_password, password, cred or _dummy(), mech)
        if not ok or cred is None:
            self.tracker.failure(host, self.clock())
            self._failed(user, host, "unknown user or wrong password")
            raise Unauthorized("authentication failed: unknown user or wrong password")
        self.tracker.success(host)
        if len(self._cache) >= self.max_entries:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            if len(self._cache) >= self.max_entries:
                self._cache.clear()
        self._cache[key] = (now + self.ttl_s, user, mech, cred)
        return user

    def _failed(self, user: str, host: str, why: str) -> None:
        log.warning("REST authentication failed", extra={"user": user, "host": host, "reason": why})
        try:
            from shared.security import audit
        except ImportError:  # pragma: no cover
            return
        try:
            audit.event("authentication_failure", principal=f"User:{user}", host=host, door="rest",
                        operation="HTTP Basic", resource="", detail=why)
        except Exception:
            log.exception("audit failed")
