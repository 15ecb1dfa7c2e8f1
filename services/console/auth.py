"""Signing in to the console on a secure cluster (issue 23): HTTP Basic with a cluster user, and the console
acting as that user everywhere.

A plaintext cluster needs none of this (no sign-in, the console's own clients, as before). On a secure
cluster every page and API route (not ``/static`` nor ``/healthz``) needs an ``Authorization: Basic``
header with a SCRAM user of the cluster and its password (the browser's own prompt: the console answers
401 with ``WWW-Authenticate: Basic``). The console never checks a password itself and keeps none on disk:

* the first request of a (user, password) pair is checked by the controller (``GET /v1/cluster`` with that
  credential: 401 means refused; any other answer, 403 included, means the user is who they say);
* it then gets a ``UserSession``: the REST API called as the user (``RestApi.as_user``), and its own
  gRPC clients to the brokers (``LogReader``, ``RecordSender``, the tail's consumer) with SASL_SSL: TLS
  verified with the cluster's CA and a SCRAM session of that user (SCRAM-SHA-512, or SHA-256 when the
  user has only that credential). So the controller's and the brokers' ACLs apply in the console exactly as
  to the user's own clients, and a refusal shows its Kafka name (``TOPIC_AUTHORIZATION_FAILED`` ...);
* sessions are kept in memory only, keyed by the user and an HMAC of the password under a per-process
  random key (a wrong password never matches a session), at most ``max_sessions`` of them, each dropped
  after ``idle_s`` unused or ``max_age_s`` in all (then the next request signs in again);
* an upstream 401 later (the password changed, the user deleted) drops the session and prompts again;
* failed sign-ins are counted per browser host (``AuthFailureTracker``: after a few, that host waits a
  growing delay before its next attempt is forwarded), logged with the user name, never the password.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from services.console.logs import LogReader, RecordSender
from services.console.upstream import RestApi, UpstreamError
from shared.client.security import ClientSecurity, client_security
from shared.security.auth_failures import AuthFailureTracker
from shared.security.scram import SaslAuthenticationError

log = logging.getLogger(__name__)

CHALLENGE = 'Basic realm="Tidelog console", charset="UTF-8"'
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")  # tried in turn for the brokers' SCRAM handshake
MAX_HEADER = 4096
PUBLIC_PREFIXES = ("/static/", "/healthz")


@dataclass(frozen=True)
class ConsoleSecurity:
    """A secure cluster's console: the CA that signed the cluster's certificates (to verify the REST API and
    the brokers) and the console's own HTTPS certificate."""

    cafile: str
    certfile: str | None = None
    keyfile: str | None = None


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """``Basic base64(user:password)`` -> (user, password); None when absent or malformed."""
    if not header or len(header) > MAX_HEADER:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    if not sep or not user or not password:
        return None
    return user, password


class UserSession:
    """What the console uses on behalf of one signed-in user (in memory only)."""

    def __init__(self, user: str, password: str, rest: RestApi, security: ConsoleSecurity, bootstrap: str,
                 mechanism: str, client: ClientSecurity | None = None, now: float | None = None) -> None:
        self.user = user
        self.rest = rest.as_user(user, password)
        #: kafka-python's settings for this user's producer and consumers
        self.client_settings: dict[str, Any] = {
            "security_protocol": "SASL_SSL", "sasl_mechanism": mechanism, "sasl_plain_username": user,
            "sasl_plain_password": password, "ssl_cafile": security.cafile}
        self.client = client or client_security(**self.client_settings)
        self.reader = LogReader(bootstrap, security=self.client)
        self.sender = RecordSender(bootstrap, self.client_settings)
        self.created = self.used = time.monotonic() if now is None else now

    def close(self) -> None:
        """Forget the user: REST calls through this session are refused from now on, gRPC clients closed."""
        self.rest.revoked = True
        self.client_settings.clear()
        with contextlib.suppress(Exception):
            self.sender.close()
        with contextlib.suppress(Exception):
            self.reader.close()


def scram_client(user: str, password: str, cafile: str, bootstrap: str) -> tuple[str, ClientSecurity | None]:
    """The SCRAM mechanism the brokers accept for the user (SHA-512 first), and a ``ClientSecurity`` whose
    session with the first broker is already made; (SHA-512, None) when no broker could be asked.
    Blocking (a handshake): run it on a thread."""
    address = next((a.strip() for a in bootstrap.split(",") if a.strip()), "")
    for mech in MECHANISMS:
        client = client_security("SASL_SSL", mech, user, password, cafile)
        assert client is not None
        try:
            client.token(address)
        except SaslAuthenticationError:
            continue  # no credential of this mechanism (or, for the last one, refused): the next
        except Exception as exc:  # a broker away: the user's calls will say so
            log.info("SCRAM handshake not done at sign-in", extra={"user": user, "error": repr(exc)})
            return mech, client
        return mech, client
    return MECHANISMS[0], None


class Sessions:
    """Signed-in users' sessions keyed by (user, HMAC(password)), bounded, expiring."""

    def __init__(self, max_sessions: int = 64, idle_s: float = 900.0, max_age_s: float = 3600.0) -> None:
        self.max_sessions = max_sessions
        self.idle_s = idle_s
        self.max_age_s = max_age_s
        self._key = os.urandom(32)
        self._sessions: OrderedDict[tuple[str, bytes], UserSession] = OrderedDict()
        self._creating: dict[tuple[str, bytes], asyncio.Lock] = {}

    def key(self, user: str, password: str) -> tuple[str, bytes]:
        return user, hmac.new(self._key, user.encode() + b"\x00" + password.encode(), hashlib.sha256).digest()

    def _expired(self, s: UserSession, now: float) -> bool:
        return now - s.used > self.idle_s or now - s.created > self.max_age_s

    def get(self, key: tuple[str, bytes], now: float) -> UserSession | None:
        s = self._sessions.get(key)
        if s is None:
            return None
        if self._expired(s, now):
            self.drop(key)
            return None
        s.used = now
        self._sessions.move_to_end(key)
        return s

    def put(self, key: tuple[str, bytes], session: UserSession, now: float) -> None:
        old = self._sessions.pop(key, None)
        if old is not None:
            _close_later(old)
        self._sessions[key] = session
        for k in [k for k, s in self._sessions.items() if self._expired(s, now)]:
            self.drop(k)
        while len(self._sessions) > self.max_sessions:
            _, oldest = self._sessions.popitem(last=False)
            _close_later(oldest)

    def drop(self, key: tuple[str, bytes] | None) -> None:
        s = self._sessions.pop(key, None) if key is not None else None
        if s is not None:
            _close_later(s)

    def lock(self, key: tuple[str, bytes]) -> asyncio.Lock:
        lock = self._creating.get(key)
        if lock is None:
            if len(self._creating) > 4 * self.max_sessions:
                self._creating = {k: v for k, v in self._creating.items() if v.locked()}
            lock = self._creating[key] = asyncio.Lock()
        return lock

    def close(self) -> None:
        for s in self._sessions.values():
            s.close()
        self._sessions.clear()

    def __len__(self) -> int:
        return len(self._sessions)


def _close_later(session: UserSession) -> None:
    session.rest.revoked = True  # at once; the gRPC clients' threads are joined off the event loop
    threading.Thread(target=session.close, name="console-session-close", daemon=True).start()


class SignIn:
    """The console's gate on a secure cluster: the session of a request's credential, or why not."""

    def __init__(self, security: ConsoleSecurity, rest: RestApi, bootstrap: str, sessions: Sessions | None = None,
                 tracker: AuthFailureTracker | None = None) -> None:
        self.security = security
        self.rest = rest
        self.bootstrap = bootstrap
        self.sessions = sessions or Sessions()
        self.tracker = tracker if tracker is not None else AuthFailureTracker()

    async def session(self, header: str | None, host: str) -> tuple[tuple[str, bytes], UserSession]:
        """The (key, session) of ``header``'s credential; raises ``UpstreamError`` 401 when there is none or it
        is refused (502 when the REST API cannot be asked)."""
        creds = parse_basic(header)
        if creds is None:
            raise UpstreamError("SASL_AUTHENTICATION_FAILED",
                                "sign in with a user of the cluster (HTTP Basic: a SCRAM user and its password)", 401)
        user, password = creds
        key = self.sessions.key(user, password)
        found = self.sessions.get(key, time.monotonic())
        if found is not None:
            return key, found
        async with self.sessions.lock(key):
            found = self.sessions.get(key, time.monotonic())
            if found is not None:
                return key, found
            delay = self.tracker.delay_s(host, time.monotonic())
            if delay > 0:
                self._failed(user, host, "too many failed attempts from this host")
                raise UpstreamError("SASL_AUTHENTICATION_FAILED",
                                    f"too many failed sign-ins from {host}; retry in {delay:.1f} s", 401)
            try:
                await self.rest.as_user(user, password).call("GET", "/v1/cluster")
            except UpstreamError as exc:
                if exc.status == 401:
                    self.tracker.failure(host, time.monotonic())
                    self._failed(user, host, exc.message or exc.error)
                    raise UpstreamError("SASL_AUTHENTICATION_FAILED", "unknown user or wrong password", 401) from None
                if exc.status not in (403,):
                    raise  # the API away: not the user's fault
            self.tracker.success(host)
            mech, client = await asyncio.to_thread(scram_client, user, password, self.security.cafile,
                                                   self.bootstrap)
            session = UserSession(user, password, self.rest, self.security, self.bootstrap, mech, client)
            self.sessions.put(key, session, time.monotonic())
            log.info("console sign-in", extra={"user": user, "host": host, "sasl_mechanism": mech})
            return key, session

    def _failed(self, user: str, host: str, why: str) -> None:
        log.warning("console sign-in failed", extra={"user": user, "host": host, "reason": why})

    def close(self) -> None:
        self.sessions.close()
