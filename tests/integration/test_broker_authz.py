"""Issue 23, item 4 on a real secure cluster (`tidelog up --secure`): the broker enforces ACLs for SCRAM
users on its client port and refuses a forged follower fetch, from a user or even from the admin's
certificate (CVE-2018-1288); an ACL added in etcd is followed by the broker.

One small cluster for the module (controller, two brokers, coordinator, quota; real etcd with TLS): the
topic has two replicas, so acks=all writes also show real followers, fetching with their own broker
certificates, are let in."""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from shared.client.security import ClientSecurity, client_security
from shared.metadata.store import MetadataStore
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.records.builder import encode_batch
from shared.security.acl import acl
from shared.security.acl_store import SecurityStore
from shared.security.transport import TlsFiles, sync_channel
from tests.conftest import Cluster, kill_cluster, start_cluster, wait_for

pytestmark = pytest.mark.timeout(120)

OPTIONS = [("grpc.use_local_subchannel_pool", 1)]
TOPIC = "orders"
PASSWORDS = {"alice": "alice-secret-1", "bob": "bob-secret-1"}


def admin_tls(c: Cluster) -> TlsFiles:
    s = c.info["security"]
    return TlsFiles(s["ca"], s["admin_cert"], s["admin_key"])


async def _store_op(c: Cluster, op: Any) -> Any:
    host, _, port = c.info["etcd"].rpartition(":")
    store = MetadataStore((host, int(port)), c.info["cluster"], tls=admin_tls(c))
    await store.connect(wait_s=10)
    try:
        return await op(SecurityStore(store))
    finally:
        await store.close()


def store_op(c: Cluster, op: Any) -> Any:
    return asyncio.run(_store_op(c, op))


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(str(tmp_path_factory.mktemp("broker-authz")), secure=True, controllers=1, brokers=2,
                      coordinators=1, cleaners=0, quotas=1,
                      extra_env={"TIDELOG_OFFSETS_TOPIC_NUM_PARTITIONS": "1",
                                 "TIDELOG_OFFSETS_TOPIC_REPLICATION_FACTOR": "1"})
    try:
        async def setup(s: SecurityStore) -> None:
            for user, password in PASSWORDS.items():
                await s.upsert_user(user, password)
            await s.add_acls([acl("User:alice", "WRITE", "TOPIC", TOPIC)])

        store_op(c, setup)
        sec = c.info["security"]
        password = open(sec["admin_password_file"]).read().strip()

        def create() -> bool:  # the controller answers 503 while its security is still starting
            r = httpx.post(c.info["rest"] + "/v1/topics", json={"name": TOPIC, "partitions": 1,
                                                                "replication_factor": 2},
                           auth=(sec["admin_user"], password), verify=ssl.create_default_context(cafile=sec["ca"]),
                           timeout=30)
            assert r.status_code in (200, 201, 409, 503), r.text
            return r.status_code != 503

        wait_for(create, 30, what="the topic's creation")
        broker = c.procs("broker")[0]
        with sync_channel(broker.address, OPTIONS, tls=admin_tls(c)) as ch:  # wait for the topic's leader
            stub = pb_grpc.BrokerStub(ch)
            wait_for(lambda: any(t.name == TOPIC and t.partitions and t.partitions[0].leader > 0
                                 and len(t.partitions[0].isr) == 2
                                 for t in stub.Metadata(pb.MetadataRequest(topics=[TOPIC]), timeout=5).topics),
                     30, what="the topic's leader and both replicas in sync")
        yield c
    finally:
        kill_cluster(c)


def user(c: Cluster, name: str) -> ClientSecurity:
    sec = client_security("SASL_SSL", "SCRAM-SHA-512", name, PASSWORDS[name], ssl_cafile=c.info["security"]["ca"])
    assert sec is not None
    return sec


def leader(c: Cluster) -> Any:
    """The broker process leading the topic's partition."""
    with sync_channel(c.procs("broker")[0].address, OPTIONS, tls=admin_tls(c)) as ch:
        meta = pb_grpc.BrokerStub(ch).Metadata(pb.MetadataRequest(topics=[TOPIC]), timeout=5)
    return c.proc("broker", meta.topics[0].partitions[0].leader)


def client_port(c: Cluster) -> str:
    return str(leader(c).info["client_address"])


def service_tls(c: Cluster, name: str) -> TlsFiles:
    ca = c.info["security"]["ca"]
    d = os.path.dirname(ca)
    return TlsFiles(ca, os.path.join(d, f"{name}.crt"), os.path.join(d, f"{name}.key"))


def produce(ch: grpc.Channel) -> int:
    batch = encode_batch([(int(time.time() * 1000), None, b"v", None)])
    resp = pb_grpc.BrokerStub(ch).Produce(pb.ProduceRequest(acks=-1, timeout_ms=10_000, topics=[pb.ProduceTopicData(
        name=TOPIC, partitions=[pb.ProducePartitionData(partition=0, records=batch)])]), timeout=15)
    return resp.topics[0].partitions[0].error_code


def test_alice_may_write_bob_may_not(secure: Cluster) -> None:
    with user(secure, "alice").channel(client_port(secure), OPTIONS) as ch:
        assert produce(ch) == 0  # acks=all: the follower's fetches, with its own certificate, were let in
    with user(secure, "bob").channel(client_port(secure), OPTIONS) as ch:
        assert produce(ch) == 29  # TOPIC_AUTHORIZATION_FAILED


def test_metadata_hides_what_bob_may_not_describe(secure: Cluster) -> None:
    with user(secure, "alice").channel(client_port(secure), OPTIONS) as ch:
        alice = pb_grpc.BrokerStub(ch).Metadata(pb.MetadataRequest(), timeout=10)
    with user(secure, "bob").channel(client_port(secure), OPTIONS) as ch:
        bob = pb_grpc.BrokerStub(ch).Metadata(pb.MetadataRequest(), timeout=10)
        named = pb_grpc.BrokerStub(ch).Metadata(pb.MetadataRequest(topics=[TOPIC]), timeout=10)
    assert TOPIC in {t.name for t in alice.topics}  # WRITE implies DESCRIBE
    assert TOPIC not in {t.name for t in bob.topics}
    assert [(t.name, t.error_code) for t in named.topics] == [(TOPIC, 29)]
    # a client on the client port is told the brokers' client ports
    assert {b.address for b in alice.brokers} == {p.info["client_address"] for p in secure.procs("broker")}


def fetch_as_replica(ch: grpc.Channel, replica_id: int) -> int:
    resp = pb_grpc.BrokerStub(ch).Fetch(pb.FetchRequest(
        replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[pb.FetchTopic(
            name=TOPIC, partitions=[pb.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]),
        timeout=10)
    return resp.topics[0].partitions[0].error_code


def test_a_forged_follower_fetch_is_refused(secure: Cluster) -> None:
    lead = leader(secure)
    follower = next(p for p in secure.procs("broker") if p is not lead)
    with user(secure, "alice").channel(client_port(secure), OPTIONS) as ch:
        assert fetch_as_replica(ch, int(follower.id)) == 29
    with sync_channel(lead.address, OPTIONS, tls=admin_tls(secure)) as ch:
        # the admin is a super user, but not the follower's certificate
        assert fetch_as_replica(ch, int(follower.id)) == 29
    with sync_channel(lead.address, OPTIONS, tls=service_tls(secure, f"broker-{lead.id}")) as ch:
        # a broker's own certificate claiming to be the other broker (CVE-2018-1288)
        assert fetch_as_replica(ch, int(follower.id)) == 29


def test_an_acl_added_in_etcd_lets_bob_write(secure: Cluster) -> None:
    store_op(secure, lambda s: s.add_acls([acl("User:bob", "WRITE", "TOPIC", TOPIC)]))
    try:
        with user(secure, "bob").channel(client_port(secure), OPTIONS) as ch:
            wait_for(lambda: produce(ch) == 0, 10, what="bob's new ACL on the broker")
    finally:
        store_op(secure, lambda s: s.remove_acls([_bob_write_filter()]))


def _bob_write_filter() -> Any:
    from shared.security.acl import AccessControlEntryFilter, AclBindingFilter, ResourcePatternFilter, ResourceType

    return AclBindingFilter(ResourcePatternFilter(ResourceType.TOPIC, TOPIC),
                            AccessControlEntryFilter(principal="User:bob"))


def test_an_acl_change_under_load_reaches_every_broker_within_a_second(secure: Cluster) -> None:
    """While alice writes as fast as she can, bob is given DESCRIBE on the topic, then it is taken back: every
    broker follows each change (etcd watch) within 1 s of the write returning."""
    import threading

    stop = threading.Event()
    written = [0]

    def load() -> None:
        with user(secure, "alice").channel(client_port(secure), OPTIONS) as ch:
            while not stop.is_set():
                if produce(ch) == 0:
                    written[0] += 1

    def bob_sees_on(b: Any) -> Any:
        ch = user(secure, "bob").channel(str(b.info["client_address"]), OPTIONS)
        stub = pb_grpc.BrokerStub(ch)
        return ch, lambda: any(t.name == TOPIC and not t.error_code
                               for t in stub.Metadata(pb.MetadataRequest(), timeout=5).topics)

    def within(check: Any, want: bool) -> float:
        t0 = time.monotonic()
        while check() != want:
            assert time.monotonic() - t0 < 5, "the change never arrived"
            time.sleep(0.01)
        return time.monotonic() - t0

    describe = acl("User:bob", "DESCRIBE", "TOPIC", TOPIC)
    checks = [bob_sees_on(b) for b in secure.procs("broker")]
    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    try:
        wait_for(lambda: written[0] > 10, 30, what="alice's load")
        assert not any(check() for _ch, check in checks)
        store_op(secure, lambda s: s.add_acls([describe]))
        granted = [within(check, True) for _ch, check in checks]  # measured after the put returned
        store_op(secure, lambda s: s.remove_acls([_bob_write_filter()]))
        revoked = [within(check, False) for _ch, check in checks]
    finally:
        stop.set()
        loader.join(10)
        for ch, _check in checks:
            ch.close()
    print(f"ACL change seen by {len(checks)} brokers after granted={granted} revoked={revoked} s "
          f"({written[0]} acks=all writes meanwhile)")
    assert max(granted) < 1.0 and max(revoked) < 1.0, (granted, revoked)
