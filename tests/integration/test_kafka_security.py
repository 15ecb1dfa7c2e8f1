"""The Kafka listener of a secure cluster (issue 23) with real clients nobody here wrote: confluent-kafka
(librdkafka) over SASL_SSL (SCRAM-SHA-512, SCRAM-SHA-256, PLAIN) and over SSL with a client certificate
(mTLS), kcat over SASL_SSL, and raw sockets for what no client would send (plaintext to the TLS port, a
2 GB size prefix before authentication).

One secure cluster for the module (``tidelog up --secure``'s launcher: TLS everywhere, ACLs enforced,
``allow.everyone.if.no.acl.found=false``). The user ``alice`` gets ACLs on the ``sec-`` topics and groups;
the admin certificate maps to the super user ``admin``."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from shared.metadata.store import MetadataStore
from shared.security.acl import acl
from shared.security.acl_store import SecurityStore
from shared.security.transport import TlsFiles
from tests.conftest import Cluster, kill_cluster, start_cluster, wait_for
from tests.integration.kafka_util import (
    KafkaWire,
    confluent_read,
    encode_request,
    kafka_bootstrap,
    log_mark,
    log_records,
)

pytestmark = pytest.mark.timeout(120)

ALICE, ALICE_PASSWORD = "alice", "alice-" + uuid.uuid4().hex
API_VERSIONS = 18


class Secure:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        s = cluster.info["security"]
        self.ca: str = s["ca"]
        self.admin_cert: str = s["admin_cert"]
        self.admin_key: str = s["admin_key"]
        with open(s["admin_password_file"]) as f:
            self.admin_password = f.read().strip()
        self.bootstrap = kafka_bootstrap(cluster)

    def sasl(self, mechanism: str = "SCRAM-SHA-512", user: str = ALICE, password: str = ALICE_PASSWORD,
             **extra: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": self.ca,
                "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password, **extra}

    def mtls(self, **extra: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SSL", "ssl.ca.location": self.ca,
                "ssl.certificate.location": self.admin_cert, "ssl.key.location": self.admin_key, **extra}

    def broker_log(self) -> str:
        return self.cluster.procs("broker")[0].log_path


async def _setup(c: Cluster) -> None:
    s = c.info["security"]
    host, _, port = c.info["etcd"].rpartition(":")
    store = MetadataStore((host, int(port)), c.info["cluster"], tls=TlsFiles(s["ca"], s["admin_cert"], s["admin_key"]))
    await store.connect(wait_s=10)
    try:
        users = SecurityStore(store)
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            await users.upsert_user(ALICE, ALICE_PASSWORD, mech)
        # the group's first: once the broker shows alice a topic, it has both (the watch keeps etcd's order)
        await users.add_acls([acl(f"User:{ALICE}", "ALL", "GROUP", "sec-", pattern_type="PREFIXED")])
        await users.add_acls([acl(f"User:{ALICE}", "ALL", "TOPIC", "sec-", pattern_type="PREFIXED")])
    finally:
        await store.close()


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    c = start_cluster(str(tmp_path_factory.mktemp("kafka-secure")), secure=True, controllers=1, brokers=1,
                      coordinators=1, cleaners=0, quotas=1,
                      extra_env={"TIDELOG_OFFSETS_TOPIC_NUM_PARTITIONS": "1",
                                 "TIDELOG_OFFSETS_TOPIC_REPLICATION_FACTOR": "1"})
    try:
        asyncio.run(_setup(c))
        s = Secure(c)
        probe = _topic(s)
        alice = Producer(s.sasl())
        wait_for(lambda: probe in alice.list_topics(timeout=10).topics, 10, what="alice's ACLs on the broker")
        yield s
    finally:
        kill_cluster(c)


def _topic(s: Secure, prefix: str = "sec-") -> str:
    """A new topic, created by the admin through REST (alice may not create topics: no CLUSTER CREATE)."""
    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    body = {"name": name, "partitions": 1, "replication_factor": 1, "configs": {}}
    for _ in range(100):  # 503 NOT_CONTROLLER while the controller is still starting: retriable
        r = httpx.post(s.cluster.info["rest"] + "/v1/topics", auth=("admin", s.admin_password), json=body,
                       verify=ssl.create_default_context(cafile=s.ca), timeout=30)
        if r.status_code != 503:
            break
        time.sleep(0.2)
    assert r.status_code in (200, 201), r.text
    p = Producer(s.mtls())  # wait until the broker's metadata has it
    for _ in range(100):
        md = p.list_topics(name, timeout=10).topics.get(name)
        if md is not None and md.error is None and md.partitions and md.partitions[0].leader >= 0:
            break
        time.sleep(0.1)
    return name


def _produce(conf: dict[str, Any], topic: str, values: list[bytes]) -> None:
    p = Producer({**conf, "linger.ms": 5, "acks": "all"})
    errors: list[Any] = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(30) == 0 and not errors, errors


def _consume(conf: dict[str, Any], topic: str, count: int, group: str | None = None) -> list[bytes]:
    c = Consumer({**conf, "group.id": group or f"sec-g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        for _ in range(600):
            if len(got) >= count:
                break
            m = c.poll(0.1)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def _read(conf: dict[str, Any], topic: str) -> list[bytes]:
    """The topic's one partition, read to its end without a group (assign)."""
    conf = {**conf, "group.id": f"sec-read-{uuid.uuid4().hex[:8]}"}  # never joined, but looked up: ACLs apply
    return [r.rec.value for r in confluent_read(conf["bootstrap.servers"], topic, [0], **conf)
            if r.rec.value is not None]


def _auth_error(conf: dict[str, Any]) -> KafkaError:
    """The error a client gets when its authentication fails (one attempt: a long reconnect backoff, so
    this host's failure count, which slows its next attempts, stays small)."""
    errors: list[KafkaError] = []
    p = Producer({**conf, "error_cb": errors.append, "reconnect.backoff.ms": 30_000,
                  "reconnect.backoff.max.ms": 30_000})
    for _ in range(300):
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            break
        p.poll(0.1)
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, errors
    return auth[0]


def test_sasl_ssl_scram_sha_512_produce_and_consume(secure: Secure) -> None:
    """alice, with ACLs on the sec- topics and groups, produces and consumes in a group."""
    topic = _topic(secure)
    values = [f"v{i}".encode() for i in range(20)]
    _produce(secure.sasl("SCRAM-SHA-512"), topic, values)
    assert _consume(secure.sasl("SCRAM-SHA-512"), topic, 20, group=f"sec-{uuid.uuid4().hex[:6]}") == values


def test_sasl_ssl_scram_sha_256_and_plain(secure: Secure) -> None:
    topic = _topic(secure)
    _produce(secure.sasl("SCRAM-SHA-256"), topic, [b"a"])
    _produce(secure.sasl("PLAIN"), topic, [b"b"])
    assert _read(secure.sasl("PLAIN"), topic) == [b"a", b"b"]


def test_ssl_with_a_client_certificate(secure: Secure) -> None:
    """mTLS: the admin certificate (CN=admin,OU=tidelog-client -> User:admin, a super user), no SASL."""
    topic = _topic(secure)
    _produce(secure.mtls(), topic, [b"cert-1", b"cert-2"])
    assert _read(secure.mtls(), topic) == [b"cert-1", b"cert-2"]


def test_ssl_without_a_client_certificate_gets_nothing(secure: Secure) -> None:
    """Security protocol SSL but no certificate: not authenticated, so the first Metadata closes the
    connection; the client never sees a topic."""
    mark = log_mark(secure.broker_log())
    p = Producer({"bootstrap.servers": secure.bootstrap, "security.protocol": "SSL", "ssl.ca.location": secure.ca})
    with pytest.raises(KafkaException):
        p.list_topics(timeout=5)
    assert any(r.get("msg") == "closing Kafka connection: unexpected request before authentication"
               for r in log_records(secure.broker_log(), mark))


def test_plaintext_to_the_tls_port_is_refused(secure: Secure) -> None:
    with KafkaWire(secure.bootstrap.split(",")[0]) as w:
        w.send(encode_request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}))
        assert w.closed_by_peer(15)
    p = Producer({"bootstrap.servers": secure.bootstrap, "security.protocol": "PLAINTEXT"})
    with pytest.raises(KafkaException):
        p.list_topics(timeout=2)


@pytest.mark.parametrize("size", [2**31 - 1, 10 * 1024 * 1024])
def test_a_large_size_prefix_before_authentication_is_refused_unread(secure: Secure, size: int) -> None:
    """2 GB is over socket.request.max.bytes; 10 MB is under it but over the pre-authentication bound
    (64 KiB): both close the connection from the size prefix alone."""
    host, _, port = secure.bootstrap.split(",")[0].rpartition(":")
    ctx = ssl.create_default_context(cafile=secure.ca)
    mark = log_mark(secure.broker_log())
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(size.to_bytes(4, "big") + b"x" * 1000)
            try:
                closed = tls.recv(1) == b""
            except (ConnectionError, ssl.SSLError):
                closed = True
            assert closed
    assert any(r.get("msg", "").startswith("closing Kafka connection: request size") and r.get("size") == size
               for r in log_records(secure.broker_log(), mark))


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_over_sasl_ssl(secure: Secure) -> None:
    """kcat over SASL_SSL with PLAIN. (This kcat's librdkafka, 2.0.2, cannot do SCRAM with a broker that
    checks the client-final nonce as RFC 5802 says: librdkafka before 2.6.1 sends the client nonce twice
    (librdkafka#4895), which Kafka 4 refuses too; confluent-kafka's newer librdkafka does SCRAM above.)"""
    topic = _topic(secure)
    _produce(secure.sasl(), topic, [b"for-kcat"])
    conf = ["-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={secure.ca}", "-X",
            "sasl.mechanisms=PLAIN", "-X", f"sasl.username={ALICE}"]
    out = subprocess.run(["kcat", "-b", secure.bootstrap, *conf, "-X", f"sasl.password={ALICE_PASSWORD}", "-C",
                          "-t", topic, "-o", "beginning", "-e", "-J", "-q"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["payload"] for line in out.stdout.splitlines() if line.strip()] == ["for-kcat"]
    bad = subprocess.run(["kcat", "-b", secure.bootstrap, *conf, "-X", "sasl.password=wrong", "-X",
                          "reconnect.backoff.ms=30000", "-X", "reconnect.backoff.max.ms=30000", "-L", "-m", "3"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "Authentication failed" in bad.stderr, bad.stderr


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_a_wrong_password_is_an_authentication_error(secure: Secure, mechanism: str) -> None:
    mark = log_mark(secure.broker_log())
    err = _auth_error(secure.sasl(mechanism, password="not-" + ALICE_PASSWORD))
    expected = ("Invalid username or password" if mechanism == "PLAIN"
                else f"invalid credentials with SASL mechanism {mechanism}")
    assert expected in err.str(), err.str()
    failures = [r for r in log_records(secure.broker_log(), mark) if r.get("msg") == "Kafka authentication failed"]
    assert failures and failures[0].get("mechanism") == mechanism and failures[0].get("principal") == f"User:{ALICE}"


def test_an_unknown_user_is_refused_the_same_way(secure: Secure) -> None:
    err = _auth_error(secure.sasl("SCRAM-SHA-512", user="mallory", password="x"))
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in err.str()


def test_kafka_admin_requests_are_forwarded_with_the_brokers_certificate(secure: Secure) -> None:
    """CreateTopics on the Kafka door: the broker checks the caller's rights, then forwards to the
    controller's REST API authenticated by its own service certificate. The admin (mTLS) may create a
    topic; alice (no CLUSTER/TOPIC CREATE outside sec-) is refused with TOPIC_AUTHORIZATION_FAILED."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"adm-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(secure.mtls())
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)
    assert name in admin.list_topics(timeout=10).topics
    alice = AdminClient(secure.sasl())
    other = f"adm-{uuid.uuid4().hex[:8]}"
    with pytest.raises(KafkaException) as refused:
        alice.create_topics([NewTopic(other, 1, 1)])[other].result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # alice may create sec- topics: the controller authorizes, and audits, her (not the broker forwarding)
    mine = f"sec-adm-{uuid.uuid4().hex[:8]}"
    alice.create_topics([NewTopic(mine, 1, 1)])[mine].result(timeout=30)

    def audited() -> bool:
        for root, _dirs, files in os.walk(secure.cluster.lc.spec.data_dir):
            for f in files:
                if f == "audit.log":
                    for line in open(os.path.join(root, f)):
                        e = json.loads(line)
                        if e["kind"] == "admin_change" and mine in e["resource"]:
                            return bool(e["principal"] == f"User:{ALICE}")
        return False

    wait_for(audited, 10, what="the controller's audit line naming alice")
