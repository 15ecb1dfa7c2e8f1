"""``tidelog users`` and ``tidelog acls`` against a real plaintext cluster (one controller, one broker): the
CLI goes through the controller's REST API, and what it creates lands in etcd where ``SecurityStore`` keys it
(only the salted credential for users). A bad flag exits with status 2 before anything is sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from shared.cli.main import cli
from shared.metadata.store import MetadataStore
from shared.security.acl import acl
from shared.security.acl_store import SecurityKeys
from shared.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential, verify_password
from shared.settings import parse_endpoint
from tests.conftest import Cluster, kill_cluster, start_cluster


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, list[str]]]:
    data = str(tmp_path_factory.mktemp("acls-cli"))
    c = start_cluster(data, brokers=1, controllers=1, coordinators=0, cleaners=0, quotas=0,
                      extra_env={"TIDELOG_CONTROLLED_SHUTDOWN_ENABLE": "false"})
    yield c, ["--data-dir", data, "--rest", c.rest]
    kill_cluster(c)


def run(args: list[str], where: list[str], input: str | None = None) -> Result:
    return CliRunner().invoke(cli, [*args, *where], input=input)


def etcd_values(c: Cluster, prefix: str) -> dict[bytes, Any]:
    async def go() -> dict[bytes, Any]:
        store = MetadataStore(parse_endpoint(c.info["etcd"]), c.info["cluster"])
        await store.connect(10)
        try:
            keys = SecurityKeys(store.keys.root)
            got = await store.get_prefix(keys.acls_prefix() if prefix == "acls" else keys.users_prefix())
            return {k: v for k, (v, _c, _m) in got.items()}
        finally:
            await store.close()

    return asyncio.run(go())


def keys_of(c: Cluster) -> SecurityKeys:
    return SecurityKeys(f"/tidelog/{c.info['cluster']}/")


def test_users_create_list_delete(plain: tuple[Cluster, list[str]]) -> None:
    c, where = plain
    made = run(["users", "create", "alice", "--password", "alice-secret", "--iterations", "8192"], where)
    assert made.exit_code == 0, made.output
    assert "Created user 'alice' (SCRAM-SHA-512, iterations=8192)" in made.output
    assert run(["users", "create", "alice", "--password", "other", "--mechanism", "scram-sha-256"],
               where).exit_code == 0
    listed = run(["users", "list"], where)
    assert listed.exit_code == 0
    assert ("SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=4096, "
            "SCRAM-SHA-512=iterations=8192") in listed.output
    assert "secret" not in listed.output
    stored = etcd_values(c, "users")
    cred = ScramCredential.from_kafka_string(stored[keys_of(c).user("alice", SCRAM_SHA_512)]["credential"])
    assert verify_password("alice-secret", cred, SCRAM_SHA_512)
    assert "alice-secret" not in json.dumps({k.decode(): v for k, v in stored.items()})

    assert run(["users", "delete", "alice", "--mechanism", "SCRAM-SHA-256"], where).exit_code == 0
    assert set(etcd_values(c, "users")) == {keys_of(c).user("alice", SCRAM_SHA_512)}
    missing = run(["users", "delete", "alice", "--mechanism", "SCRAM-SHA-256"], where)
    assert missing.exit_code == 1 and "user 'alice' has no SCRAM-SHA-256 credential" in missing.output
    assert run(["users", "delete", "alice"], where).exit_code == 0
    assert keys_of(c).user("alice", SCRAM_SHA_256) not in etcd_values(c, "users")
    assert "No users." in run(["users", "list"], where).output


def test_acls_add_list_remove(plain: tuple[Cluster, list[str]]) -> None:
    c, where = plain
    added = run(["acls", "add", "--allow-principal", "User:alice", "--allow-principal", "User:bob",
                 "--operation", "Read", "--operation", "Describe", "--topic", "orders"], where)
    assert added.exit_code == 0, added.output
    assert "Added 4 ACL binding(s)." in added.output
    assert run(["acls", "add", "--allow-principal", "User:app", "--operation", "Write", "--topic", "orders-",
                "--resource-pattern-type", "prefixed"], where).exit_code == 0
    assert run(["acls", "add", "--deny-principal", "User:mallory", "--deny-host", "10.0.0.7", "--cluster",
                "--operation", "Alter"], where).exit_code == 0
    assert run(["acls", "add", "--allow-principal", "User:c", "--consumer", "--topic", "orders",
                "--group", "billing"], where).exit_code == 0
    stored = etcd_values(c, "acls")
    k = keys_of(c)
    assert k.acl(acl("User:alice", "READ", "TOPIC", "orders")) in stored
    assert k.acl(acl("User:app", "WRITE", "TOPIC", "orders-", pattern_type="PREFIXED")) in stored
    assert k.acl(acl("User:mallory", "ALTER", "CLUSTER", "kafka-cluster", permission="DENY", host="10.0.0.7")) in stored
    assert k.acl(acl("User:c", "READ", "GROUP", "billing")) in stored
    assert len(stored) == 4 + 1 + 1 + 3

    listed = run(["acls", "list", "--topic", "orders-eu", "--resource-pattern-type", "match"], where)
    assert listed.exit_code == 0
    assert "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders-, patternType=PREFIXED)`:" \
        in listed.output
    assert "(principal=User:app, host=*, operation=WRITE, permissionType=ALLOW)" in listed.output
    assert "name=orders," not in listed.output  # the literal 'orders' does not apply to orders-eu
    everything = json.loads(run(["acls", "list", "--json"], where).output)["acls"]
    assert len(everything) == len(stored)
    alice = json.loads(run(["acls", "list", "--principal", "User:alice", "--json"], where).output)["acls"]
    assert {a["operation"] for a in alice} == {"READ", "DESCRIBE"}

    # without principals: every ACL of the resource, after asking
    declined = run(["acls", "remove", "--topic", "orders"], where, input="n\n")
    assert declined.exit_code == 1 and len(etcd_values(c, "acls")) == len(stored)
    one = run(["acls", "remove", "--allow-principal", "User:bob", "--topic", "orders", "--force"], where)
    assert one.exit_code == 0 and "Removed 2 ACL binding(s)." in one.output
    assert run(["acls", "remove", "--topic", "orders"], where, input="y\n").exit_code == 0
    left = etcd_values(c, "acls")
    assert all(v["resource_name"] != "orders" for v in left.values()) and len(left) == 3
    assert run(["acls", "remove", "--cluster", "--topic", "orders-", "--resource-pattern-type", "prefixed",
                "--group", "billing", "--force"], where).exit_code == 0
    # the prefixed filter does not reach the literal cluster and group bindings; a literal pass does
    assert len(etcd_values(c, "acls")) == 2
    assert run(["acls", "remove", "--cluster", "--group", "billing", "--force"], where).exit_code == 0
    assert etcd_values(c, "acls") == {}
    assert "No ACLs found." in run(["acls", "list"], where).output


@pytest.mark.parametrize("args", [
    ["acls", "add", "--allow-principal", "alice", "--topic", "t"],
    ["acls", "add", "--allow-principal", "User:alice", "--topic", "t", "--operation", "Fly"],
    ["acls", "add", "--allow-principal", "User:alice", "--group", "g", "--operation", "Write"],
    ["acls", "add", "--allow-principal", "User:alice", "--operation", "Read"],
    ["acls", "add", "--topic", "t", "--operation", "Read"],
    ["acls", "add", "--allow-host", "10.0.0.1", "--deny-principal", "User:x", "--topic", "t"],
    ["acls", "add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"],
    ["acls", "add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "glob"],
    ["acls", "remove", "--allow-principal", "User:a", "--force"],
    ["acls", "list", "--principal", "bob"],
    ["acls", "add", "--allow-principal", "User:a", "--topic", "t", "--bogus"],
    ["users", "create", "bob", "--password", "x", "--iterations", "100"],
    ["users", "create", "bob", "--password", "x", "--mechanism", "SCRAM-SHA-1"],
    ["users", "create", "a/b", "--password", "x"],
    ["users", "delete", "bob", "--mechanism", "MD5"],
], ids=lambda a: " ".join(a[:2] + a[-2:]))
def test_bad_flags_exit_2_and_change_nothing(plain: tuple[Cluster, list[str]], args: list[str]) -> None:
    c, where = plain
    before = etcd_values(c, "acls"), etcd_values(c, "users")
    got = run(args, where)
    assert got.exit_code == 2, got.output
    assert "Error:" in got.output
    assert (etcd_values(c, "acls"), etcd_values(c, "users")) == before
