"""Certificates and the admin user for compose's ``secure`` profile (deploy/compose.secure.yaml).

    python pki.py certs DIR            a CA, one certificate per compose service (its host name as a SAN),
                                       etcd's, and the admin client certificate, unless DIR/ca.crt exists
    python pki.py admin-user DIR ETCD  the SCRAM user ``admin`` (SHA-256 and SHA-512) with a random password
                                       written to DIR/admin.password (0600), unless that file exists

Runs in the tidelog image (``shared`` importable); the same library as ``tidelog up --secure``.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys

from shared.cli.launcher import ADMIN_USER, write_secret
from shared.security import certs

#: (role, id, host name) of every compose service with a certificate; the cleaners (scalable, id 0)
#: share one.
SERVICES = [
    ("controller", 1, "controller-1"), ("controller", 2, "controller-2"),
    ("broker", 1, "broker-1"), ("broker", 2, "broker-2"), ("broker", 3, "broker-3"),
    ("coordinator", 1, "coordinator"), ("quota", 1, "quota"), ("cleaner", 0, "cleaner"),
]


def make_certs(directory: str) -> None:
    if os.path.exists(os.path.join(directory, "ca.crt")):
        print(f"{directory}/ca.crt exists: keeping the cluster's certificates")
        return
    ca = certs.create_ca()
    certs.write_pem(directory, "ca", ca)
    for role, ident, host in SERVICES:
        issued = certs.issue_service(ca, role, ident, sans=[host, *certs.DEFAULT_SANS])
        certs.write_pem(directory, certs.service_common_name(role, ident), issued)
    certs.write_pem(directory, "etcd-server", certs.issue_service(ca, "etcd", "server", sans=["etcd"]))
    certs.write_pem(directory, ADMIN_USER, certs.issue_client(ca, ADMIN_USER))
    os.chmod(os.path.join(directory, "ca.key"), 0o600)
    print(f"certificates written to {directory}")


def make_admin_user(directory: str, etcd: str) -> None:
    from shared.metadata.store import MetadataStore
    from shared.security.acl_store import SecurityStore
    from shared.security.transport import TlsFiles

    path = os.path.join(directory, f"{ADMIN_USER}.password")
    if os.path.exists(path):
        print(f"{path} exists: keeping the admin user")
        return
    password = secrets.token_urlsafe(24)
    host, _, port = etcd.rpartition(":")
    tls = TlsFiles(os.path.join(directory, "ca.crt"), os.path.join(directory, f"{ADMIN_USER}.crt"),
                   os.path.join(directory, f"{ADMIN_USER}.key"))

    async def create() -> None:
        store = MetadataStore((host, int(port)), os.environ.get("TIDELOG_CLUSTER", "tidelog"), tls=tls)
        await store.connect(wait_s=60)
        try:
            for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                await SecurityStore(store).upsert_user(ADMIN_USER, password, mech)
        finally:
            await store.close()

    asyncio.run(create())
    write_secret(path, password + "\n")
    print(f"SCRAM user {ADMIN_USER} created; its password is in {path}")


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "certs":
        make_certs(argv[1])
    elif len(argv) == 3 and argv[0] == "admin-user":
        make_admin_user(argv[1], argv[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
