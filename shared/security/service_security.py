"""The per-process security object every service builds at start (``service.security``).

Plaintext (the default): ``ServiceSecurity.disabled()`` — no TLS, no store, no authorizer, everyone is
``ANONYMOUS`` and allowed (Kafka without ``authorizer.class.name``). Secure (``security_protocol=SSL``):
TLS files, a ``SecurityStore`` following ACLs and SCRAM users in etcd, and an ``Authorizer`` whose super
users are ``super_users`` plus every service certificate's principal (added when first seen), with
``allow.everyone.if.no.acl.found`` from the settings (false unless set).

``certificate_principal(context)`` maps a gRPC call's verified client certificate to a principal name
(``ssl.principal.mapping.rules``); ``shared.service.serve`` installs it as the request context's
principal resolver, and ``shared.security.grpc_auth`` extends it with SCRAM session tokens.
Must not import ``services``.
"""

from __future__ import annotations

import logging
from typing import Any

from shared.metadata.store import MetadataStore
from shared.quota.entities import ANONYMOUS
from shared.request_context import subject_role
from shared.security.acl_store import SecurityStore
from shared.security.authorizer import Authorizer
from shared.security.certs import SERVICE_OU
from shared.security.principal_mapping import NoMatchingRuleError, PrincipalMapper
from shared.security.transport import TlsFiles

log = logging.getLogger(__name__)


def tls_files(settings: Any) -> TlsFiles | None:
    """The TLS files of a service's settings when ``security_protocol`` is SSL, else None."""
    if str(getattr(settings, "security_protocol", "PLAINTEXT")).upper() != "SSL":
        return None
    cafile, certfile, keyfile = settings.ssl_cafile, settings.ssl_certfile, settings.ssl_keyfile
    if not (cafile and certfile and keyfile):
        raise ValueError("security_protocol=SSL needs ssl_cafile, ssl_certfile and ssl_keyfile")
    return TlsFiles(cafile, certfile, keyfile)


class ServiceSecurity:
    def __init__(self, *, enabled: bool, tls: TlsFiles | None = None, store: SecurityStore | None = None,
                 authorizer: Authorizer | None = None, mapper: PrincipalMapper | None = None) -> None:
        self.enabled = enabled
        self.tls = tls
        self.store = store
        self.authorizer = authorizer
        self.mapper = mapper or PrincipalMapper("DEFAULT")

    @classmethod
    def disabled(cls) -> ServiceSecurity:
        return cls(enabled=False)

    @classmethod
    def from_settings(cls, settings: Any, metadata: MetadataStore) -> ServiceSecurity:
        """Plaintext settings give ``disabled()``; SSL ones a store (not started yet: ``await start()``)."""
        tls = tls_files(settings)
        if tls is None:
            return cls.disabled()
        mapper = PrincipalMapper(getattr(settings, "ssl_principal_mapping_rules", "DEFAULT") or "DEFAULT")
        allow = getattr(settings, "allow_everyone_if_no_acl_found", None)
        authorizer = Authorizer(super_users=getattr(settings, "super_users", "") or "",
                                allow_everyone_if_no_acl_found=bool(allow) if allow is not None else False)
        return cls(enabled=True, tls=tls, store=SecurityStore(metadata, authorizer), authorizer=authorizer,
                   mapper=mapper)

    async def start(self, timeout: float = 10.0) -> None:
        """Follow ACLs and users in etcd; returns once the first snapshots are in."""
        if self.store is not None:
            self.store.start()
            await self.store.ready(timeout)

    # -- principals ---------------------------------------------------------------------------------------

    @staticmethod
    def peer_subject(context: Any) -> str | None:
        """The verified client certificate's DN of a gRPC call (None without one)."""
        try:
            auth = context.auth_context()
        except Exception:
            return None
        subjects = auth.get("x509_subject") if auth else None
        if not subjects:
            return None
        subject = subjects[0]
        return subject.decode(errors="replace") if isinstance(subject, bytes) else str(subject)

    def certificate_principal(self, context: Any) -> tuple[str, str | None]:
        """``(principal name, DN)`` of the call's verified client certificate, or ``(ANONYMOUS, None)``."""
        if not self.enabled:
            return ANONYMOUS, None
        return self.principal_for_subject(self.peer_subject(context))

    def principal_for_subject(self, subject: str | None) -> tuple[str, str | None]:
        """``(principal name, DN)`` of a verified certificate's DN (``ssl.principal.mapping.rules``), or
        ``(ANONYMOUS, None)``: the gRPC doors, and REST for a service that presents its certificate."""
        if not self.enabled or subject is None:
            return ANONYMOUS, None
        try:
            name = self.mapper.name(subject)
        except NoMatchingRuleError:
            log.warning("no principal mapping rule applies to a client certificate", extra={"subject": subject})
            return ANONYMOUS, None
        if is_service_subject(subject) and subject_role(subject) not in NOT_SUPER and self.authorizer is not None:
            self._note_service_principal(f"User:{name}")
        return name, subject

    def _note_service_principal(self, principal: str) -> None:
        """Every service certificate's principal is a super user (the set of service ids is open-ended:
        a principal joins ``super.users`` the first time its verified certificate is seen, before the
        call it came with is authorized)."""
        auth = self.authorizer
        if auth is not None and principal not in auth.super_users:
            auth.set_super_users(auth.super_users | {principal})


#: Service roles whose certificate is no super user: the console acts only as its signed-in users (its
#: certificate serves HTTPS and health checks), so a stolen console certificate grants nothing.
NOT_SUPER = frozenset({"console"})


def is_service_subject(subject: str) -> bool:
    """A service certificate: ``CN=<role>-<id>,OU=tidelog-service`` (verified by the CA already)."""
    parts = dict(p.split("=", 1) for p in subject.split(",") if "=" in p)
    return parts.get("OU") == SERVICE_OU and "-" in parts.get("CN", "")
