"""ACLs and SCRAM credentials in etcd, and the per-process caches that follow them by watch.

Key layout (under the cluster prefix; names percent-encoded, so '/' in a topic or principal is safe)::

    /tidelog/<cluster>/acls/<TYPE>/<PATTERN>/<name>/<principal>/<host>/<OPERATION>/<PERMISSION>
                                        one key per binding, value = binding_to_json(binding)
    /tidelog/<cluster>/users/<name>/<MECHANISM>
                                        {"mechanism": "SCRAM-SHA-512", "credential": "salt=...,stored_key=...,
                                         server_key=...,iterations=4096"} (Kafka's form; never the password)

One key per binding (Kafka keeps one znode per resource): adding or removing a binding is one put or
delete, never a read-modify-write of a shared list, so two admins adding ACLs at once cannot lose
one. A user has one key per mechanism, as Kafka's ``AlterUserScramCredentials`` does.

``SecurityStore.start()`` watches both prefixes (``MetadataStore.watch_prefix``: a fresh snapshot after
every change, typically within tens of milliseconds) and feeds the ``Authorizer`` (``replace_all``) and
the credential cache that ``credential()`` answers from synchronously (a ``ScramServer`` lookup).

Key spelling lives in ``shared.metadata.keys`` (``SecurityKeys``).
Must not import ``services`` or ``pipelines``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from shared.metadata.keys import SecurityKeys
from shared.metadata.store import MetadataStore, Snapshot
from shared.security.acl import (
    AclBinding,
    AclBindingFilter,
    InvalidAclError,
    binding_from_json,
    binding_sort_key,
    binding_to_json,
)
from shared.security.authorizer import Authorizer
from shared.security.scram import (
    DEFAULT_ITERATIONS,
    SCRAM_SHA_512,
    ScramCredential,
    ScramMechanism,
    create_credential,
    mechanism,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UserInfo:
    """What ``users list`` shows (Kafka's DescribeUserScramCredentials: mechanism and iterations)."""

    name: str
    mechanisms: dict[str, int]  # mechanism name -> iterations


class SecurityStore:
    """ACL and user administration in etcd, plus watched caches of both."""

    def __init__(self, metadata: MetadataStore, authorizer: Authorizer | None = None) -> None:
        self.metadata = metadata
        self.keys = SecurityKeys(metadata.keys.root)
        self.authorizer = authorizer if authorizer is not None else Authorizer()
        self._credentials: dict[tuple[str, str], ScramCredential] = {}
        self.acl_revision = 0  # highest mod revision seen in the last ACL snapshot
        self.acls_loaded = asyncio.Event()
        self.users_loaded = asyncio.Event()
        self._watches: list[asyncio.Task[None]] = []

    # -- following changes ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start following ACLs and users (until ``metadata.close()``). Await ``ready()`` to know the
        first snapshot is in."""
        self._watches = [
            self.metadata.watch_prefix(self.keys.acls_prefix(), self._on_acls, name="acls"),
            self.metadata.watch_prefix(self.keys.users_prefix(), self._on_users, name="users"),
        ]

    async def ready(self, timeout: float = 10.0) -> None:
        await asyncio.wait_for(asyncio.gather(self.acls_loaded.wait(), self.users_loaded.wait()), timeout)

    def _on_acls(self, snapshot: Snapshot) -> None:
        bindings = []
        for key, (value, _create, _mod) in snapshot.items():
            try:
                bindings.append(binding_from_json(value))
            except (InvalidAclError, TypeError, ValueError, KeyError) as exc:
                log.warning("ignoring invalid ACL in etcd", extra={"key": key.decode(errors="replace"), "error": str(exc)})
        self.acl_revision = max((m for _, _, m in snapshot.values()), default=0)
        if self.authorizer.replace_all(bindings):
            log.info("ACLs reloaded", extra={"acls": len(bindings)})
        self.acls_loaded.set()

    def _on_users(self, snapshot: Snapshot) -> None:
        creds: dict[tuple[str, str], ScramCredential] = {}
        for key, (value, _create, _mod) in snapshot.items():
            parsed = self.keys.parse_user(key)
            try:
                if parsed is None:
                    raise ValueError("not a user key")
                creds[parsed] = ScramCredential.from_kafka_string(value["credential"])
            except (ValueError, TypeError, KeyError) as exc:
                log.warning("ignoring invalid user in etcd", extra={"key": key.decode(errors="replace"), "error": str(exc)})
        self._credentials = creds
        self.users_loaded.set()

    def credential(self, username: str, mech: ScramMechanism | str) -> ScramCredential | None:
        """The cached credential (None if the user has none for this mechanism): a ScramServer lookup."""
        name = mech if isinstance(mech, str) else mech.name
        return self._credentials.get((username, name))

    # -- ACL administration ------------------------------------------------------------------------------

    async def add_acls(self, bindings: Iterable[AclBinding]) -> list[AclBinding]:
        """Create bindings (validated first, all or none); returns those that were new."""
        bindings = list(dict.fromkeys(b.validate() for b in bindings))
        added = []
        for b in bindings:
            created, _rev = await self.metadata.create(self.keys.acl(b), binding_to_json(b))
            if created:
                added.append(b)
        return added

    async def describe_acls(self, flt: AclBindingFilter | None = None) -> list[AclBinding]:
        """Bindings in etcd matching ``flt`` (read from etcd, not the cache)."""
        out = []
        for value, _c, _m in (await self.metadata.get_prefix(self.keys.acls_prefix())).values():
            try:
                b = binding_from_json(value)
            except (InvalidAclError, TypeError, ValueError):
                continue
            if flt is None or flt.matches(b):
                out.append(b)
        return sorted(out, key=binding_sort_key)

    async def remove_acls(self, filters: AclBindingFilter | Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Delete every binding any filter matches; returns those deleted (by this call)."""
        flts = [filters] if isinstance(filters, AclBindingFilter) else list(filters)
        for f in flts:
            f.validate()
        removed = []
        for b in await self.describe_acls():
            if any(f.matches(b) for f in flts):
                deleted = await self.metadata.client.delete(self.keys.acl(b))
                if deleted:
                    removed.append(b)
        return removed

    # -- users (SCRAM credentials) ---------------------------------------------------------------------------

    async def upsert_user(self, name: str, password: str, mech: ScramMechanism | str = SCRAM_SHA_512,
                          iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
        """Create or replace ``name``'s credential for ``mech``. Only the salted keys reach etcd."""
        if not name:
            raise ValueError("user name must not be empty")
        m = mechanism(mech) if isinstance(mech, str) else mech
        cred = create_credential(password, m, iterations)
        await self.metadata.put(self.keys.user(name, m), {"mechanism": m.name, "credential": cred.to_kafka_string()})
        return cred

    async def delete_user(self, name: str, mech: ScramMechanism | str | None = None) -> bool:
        """Delete one mechanism's credential, or all of the user's when ``mech`` is None; False if none."""
        if mech is None:
            return bool(await self.metadata.client.delete_prefix(self.keys.user_prefix(name)))
        m = mechanism(mech) if isinstance(mech, str) else mech
        return bool(await self.metadata.client.delete(self.keys.user(name, m)))

    async def list_users(self) -> list[UserInfo]:
        users: dict[str, dict[str, int]] = {}
        for key, (value, _c, _m) in (await self.metadata.get_prefix(self.keys.users_prefix())).items():
            parsed = self.keys.parse_user(key)
            if parsed is None:
                continue
            try:
                iterations = ScramCredential.from_kafka_string(value["credential"]).iterations
            except (ValueError, TypeError, KeyError):
                continue
            users.setdefault(parsed[0], {})[parsed[1]] = iterations
        return [UserInfo(n, dict(sorted(m.items()))) for n, m in sorted(users.items())]

    async def get_credential(self, name: str, mech: ScramMechanism | str) -> ScramCredential | None:
        """Read one credential from etcd (not the cache)."""
        m = mechanism(mech) if isinstance(mech, str) else mech
        got = await self.metadata.get(self.keys.user(name, m))
        return None if got is None else ScramCredential.from_kafka_string(got[0]["credential"])

