"""ACLs and SCRAM users in a real etcd: one store instance writes, another instance's authorizer and
credential cache follow by watch within 1 s; only salted keys ever reach etcd.

Needs only etcd, so it starts a bare one (the launcher's etcd binary) rather than a whole cluster."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator

import httpx
import pytest

from shared.cli.launcher import etcd_binary, free_port
from shared.metadata.store import MetadataStore
from shared.security.acl import (
    AccessControlEntryFilter,
    AclBindingFilter,
    AclOperation,
    PatternType,
    ResourcePatternFilter,
    ResourceType,
    acl,
)
from shared.security.acl_store import SecurityStore
from shared.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramClient, ScramServer

PROPAGATION_S = 1.0


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    data = tmp_path_factory.mktemp("etcd")
    client, peer = free_port(), free_port()
    argv = [
        etcd_binary(), "--name", "acl-test", "--data-dir", str(data / "etcd"),
        "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
        "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
        "--initial-cluster", f"acl-test=http://127.0.0.1:{peer}",
        "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}", "--log-level", "warn",
    ]
    with open(data / "etcd.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{client}/health", timeout=0.5).json().get("health") == "true":
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "etcd did not start"
            time.sleep(0.1)
        yield ("127.0.0.1", client)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _store(endpoint: tuple[str, int], cluster: str) -> SecurityStore:
    md = MetadataStore(endpoint, cluster)
    await md.connect(wait_s=10)
    store = SecurityStore(md)
    store.start()
    await store.ready()
    return store


async def _within(seconds: float, predicate: Callable[[], bool], what: str) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > seconds:
            raise AssertionError(f"not within {seconds}s: {what}")
        await asyncio.sleep(0.01)
    return time.monotonic() - start


def _run(coro_fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(coro_fn(), 60))


def test_acl_added_in_one_instance_is_seen_by_another_within_1s(etcd: tuple[str, int]) -> None:
    async def main() -> None:
        writer, reader = await _store(etcd, "acl-prop"), await _store(etcd, "acl-prop")
        try:
            args = ("User:alice", "10.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, "orders-eu")
            assert not reader.authorizer.authorize(*args)
            binding = acl("User:alice", "WRITE", "TOPIC", "orders-", pattern_type="PREFIXED")
            assert await writer.add_acls([binding]) == [binding]
            assert await writer.add_acls([binding]) == []  # already there
            took = await _within(PROPAGATION_S, lambda: reader.authorizer.authorize(*args), "ACL propagation")
            print(f"ACL add seen by the other instance after {took * 1000:.0f} ms")
            assert reader.authorizer.authorize("User:alice", "10.0.0.1", AclOperation.DESCRIBE, ResourceType.TOPIC, "orders-x")

            deny = acl("User:alice", "WRITE", "TOPIC", "orders-eu", permission="DENY")
            await writer.add_acls([deny])
            await _within(PROPAGATION_S, lambda: not reader.authorizer.authorize(*args), "DENY propagation")

            found = await reader.describe_acls(AclBindingFilter(
                ResourcePatternFilter(ResourceType.TOPIC, "orders-eu", PatternType.MATCH)))
            assert set(found) == {binding, deny}

            removed = await writer.remove_acls(AclBindingFilter(entry=AccessControlEntryFilter(principal="User:alice")))
            assert set(removed) == {binding, deny}
            await _within(PROPAGATION_S, lambda: len(reader.authorizer) == 0, "delete propagation")
            assert not reader.authorizer.authorize(*args)
            assert await writer.remove_acls(AclBindingFilter()) == []
        finally:
            await writer.metadata.close()
            await reader.metadata.close()

    _run(main)


def test_acls_of_other_clusters_do_not_leak(etcd: tuple[str, int]) -> None:
    async def main() -> None:
        a, b = await _store(etcd, "acl-a"), await _store(etcd, "acl-b")
        try:
            await a.add_acls([acl("User:x", "READ", "GROUP", "g")])
            await _within(PROPAGATION_S, lambda: len(a.authorizer) == 1, "own cluster")
            await asyncio.sleep(0.2)
            assert len(b.authorizer) == 0
        finally:
            await a.metadata.close()
            await b.metadata.close()

    _run(main)


def test_users_create_list_delete_and_only_salted_keys_in_etcd(etcd: tuple[str, int]) -> None:
    password = "Tr0ub4dor&3-unique-password-text"

    async def main() -> None:
        admin, broker = await _store(etcd, "users"), await _store(etcd, "users")
        try:
            await admin.upsert_user("alice", password, "SCRAM-SHA-512", iterations=8192)
            await admin.upsert_user("alice", password, SCRAM_SHA_256)
            await admin.upsert_user("bob/ops", "another-secret", SCRAM_SHA_512)
            users = await admin.list_users()
            assert [(u.name, u.mechanisms) for u in users] == [
                ("alice", {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 8192}), ("bob/ops", {"SCRAM-SHA-512": 4096})]

            # the password text is nowhere in etcd (raw bytes, nor base64 of it)
            raw = await admin.metadata.client.get_prefix(b"/")
            blob = b"".join(kv.key + b"\0" + kv.value for kv in raw)
            for needle in (password.encode(), base64.b64encode(password.encode()), b"another-secret"):
                assert needle not in blob
            assert b"stored_key=" in blob and b"server_key=" in blob

            # the other instance's cache answers a SCRAM exchange within 1 s
            await _within(PROPAGATION_S, lambda: broker.credential("alice", SCRAM_SHA_512) is not None, "user propagation")
            server = ScramServer(SCRAM_SHA_512, lambda name: broker.credential(name, SCRAM_SHA_512))
            client = ScramClient(SCRAM_SHA_512, "alice", password)
            client.verify(server.client_final(client.final(server.client_first(client.first()))))
            assert server.username == "alice"
            assert (await admin.get_credential("alice", SCRAM_SHA_512)) == broker.credential("alice", "SCRAM-SHA-512")

            assert await admin.delete_user("alice", SCRAM_SHA_256)
            assert not await admin.delete_user("alice", SCRAM_SHA_256)
            assert await admin.delete_user("bob/ops")
            assert not await admin.delete_user("nobody")
            assert [u.name for u in await admin.list_users()] == ["alice"]
            await _within(PROPAGATION_S, lambda: broker.credential("bob/ops", SCRAM_SHA_512) is None, "user delete")
            assert broker.credential("alice", SCRAM_SHA_256) is None
            assert broker.credential("alice", SCRAM_SHA_512) is not None
        finally:
            await admin.metadata.close()
            await broker.metadata.close()

    _run(main)


def test_invalid_values_in_etcd_are_ignored(etcd: tuple[str, int]) -> None:
    async def main() -> None:
        store = await _store(etcd, "junk")
        try:
            await store.metadata.put(store.keys.acls_prefix() + b"junk", {"principal": "nope"})
            await store.metadata.put(store.keys.users_prefix() + b"x/SCRAM-SHA-512", {"credential": "garbage"})
            good = acl("User:a", "READ", "TOPIC", "t")
            await store.add_acls([good])
            await _within(PROPAGATION_S, lambda: len(store.authorizer) == 1, "the valid ACL")
            assert store.credential("x", SCRAM_SHA_512) is None
            assert await store.describe_acls() == [good]
        finally:
            await store.metadata.close()

    _run(main)


