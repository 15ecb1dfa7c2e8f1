"""`tidelog up --secure`'s cluster (the launcher with ``secure=True``): TLS on every door, etcd only with a
certificate, the admin credential and what cluster.json tells a client.

One small cluster for the module: real etcd (TLS, --client-cert-auth) and real service processes."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shared.cli.launcher import cluster_status, grpc_healthy
from shared.metadata.store import MetadataStore
from shared.security.acl_store import SecurityStore
from shared.security.transport import TlsFiles, client_facing, sync_channel
from tests.conftest import Cluster, kill_cluster, start_cluster

pytestmark = pytest.mark.timeout(120)

OPTIONS = [("grpc.use_local_subchannel_pool", 1)]


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(str(tmp_path_factory.mktemp("secure")), secure=True, controllers=1, brokers=1,
                      coordinators=1, cleaners=1, quotas=1,
                      extra_env={"TIDELOG_OFFSETS_TOPIC_NUM_PARTITIONS": "1",
                                 "TIDELOG_OFFSETS_TOPIC_REPLICATION_FACTOR": "1"})
    yield c
    kill_cluster(c)


def security(c: Cluster) -> dict[str, Any]:
    return c.info["security"]


def admin(c: Cluster) -> TlsFiles:
    s = security(c)
    return TlsFiles(s["ca"], s["admin_cert"], s["admin_key"])


def health(address: str, tls: TlsFiles | None) -> grpc.StatusCode:
    with sync_channel(address, OPTIONS, tls=tls) as ch:
        try:
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def etcdctl(c: Cluster, *flags: str, scheme: str = "https", wait: str = "5s") -> subprocess.CompletedProcess[str]:
    """``etcdctl get --prefix /tidelog/`` (``wait``: how long it tries; a refusal is waited out)."""
    binary = os.path.join(sysconfig.get_path("scripts"), "etcdctl")
    return subprocess.run([binary, "--endpoints", f"{scheme}://{c.info['etcd']}", "--dial-timeout", wait,
                           "--command-timeout", wait, *flags, "get", "--prefix", "--keys-only", "/tidelog/"],
                          capture_output=True, text=True, timeout=30)


def test_cluster_json_tells_a_client_how_to_connect(secure: Cluster) -> None:
    s = security(secure)
    assert s["protocol"] == "SSL" and s["admin_user"] == "admin"
    for path in (s["ca"], s["admin_cert"], s["admin_key"], s["admin_password_file"]):
        assert os.path.isfile(path), path
    assert stat.S_IMODE(os.stat(s["admin_password_file"]).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(s["admin_key"]).st_mode) == 0o600
    assert secure.info["rest"].startswith("https://")
    assert secure.info["console"] is None  # the module asks for none (tidelog up starts one, signing users in)


def test_every_service_up_and_healthy_with_the_admin_certificate(secure: Cluster) -> None:
    st = cluster_status(secure.info)
    assert {p["role"] for p in st["processes"]} == {"etcd", "controller", "broker", "coordinator", "quota", "cleaner"}
    assert all(p["healthy"] for p in st["processes"]), st["processes"]
    for p in secure.lc.procs:
        if p.role != "etcd":
            assert grpc_healthy(p.address, tls=admin(secure))
            assert health(p.address, admin(secure)) == grpc.StatusCode.OK


def test_etcd_refuses_a_client_without_certificate(secure: Cluster) -> None:
    ca = security(secure)["ca"]
    no_cert = etcdctl(secure, "--cacert", ca, wait="1s")
    assert no_cert.returncode != 0 and "/tidelog/" not in no_cert.stdout
    plaintext = etcdctl(secure, scheme="http", wait="1s")
    assert plaintext.returncode != 0 and "/tidelog/" not in plaintext.stdout
    a = admin(secure)
    with_cert = etcdctl(secure, "--cacert", ca, "--cert", a.certfile or "", "--key", a.keyfile or "")
    assert with_cert.returncode == 0, with_cert.stderr
    assert f"/tidelog/{secure.info['cluster']}/" in with_cert.stdout


def test_plaintext_and_certificateless_grpc_refused(secure: Cluster) -> None:
    broker = secure.procs("broker")[0]
    client_port = broker.info["client_address"]
    assert client_port != broker.address
    for address in (broker.address, client_port):
        assert health(address, None) == grpc.StatusCode.UNAVAILABLE  # plaintext to a TLS port
    ca_only = TlsFiles(security(secure)["ca"])
    assert health(broker.address, ca_only) == grpc.StatusCode.UNAVAILABLE  # internal port: a certificate required
    assert health(client_port, ca_only) == grpc.StatusCode.OK  # client port: TLS, then SCRAM


def test_registrations_carry_the_client_address_and_the_admin_user_is_stored_hashed(secure: Cluster) -> None:
    import asyncio

    host, _, port = secure.info["etcd"].rpartition(":")
    password = open(security(secure)["admin_password_file"]).read().strip()

    async def read() -> tuple[dict[bytes, Any], Any, bytes]:
        store = MetadataStore((host, int(port)), secure.info["cluster"], tls=admin(secure))
        await store.connect(wait_s=10)
        try:
            brokers = await store.get_prefix(store.keys.brokers_prefix())
            cred = await SecurityStore(store).get_credential("admin", "SCRAM-SHA-512")
            raw = b"".join(kv.value for kv in await store.client.get_prefix(store.keys.root.encode()))
            return brokers, cred, raw
        finally:
            await store.close()

    brokers, cred, raw = asyncio.run(read())
    (reg, _c, _m), = brokers.values()
    assert client_facing(reg) == reg["client_address"] == secure.procs("broker")[0].info["client_address"]
    assert cred is not None and cred.iterations >= 4096
    assert password.encode() not in raw  # never the password itself


def test_rest_only_over_https(secure: Cluster) -> None:
    url = secure.info["rest"]
    with pytest.raises(httpx.HTTPError):
        httpx.get(url.replace("https://", "http://") + "/v1/cluster", timeout=3)
    with pytest.raises(httpx.HTTPError):  # a CA nobody configured: the default trust store refuses it
        httpx.get(url + "/v1/cluster", timeout=3)


def scram_login(address: str, ca: str, user: str, password: str) -> tuple[int, str]:
    """The SCRAM-SHA-512 handshake on a client port: ``(error_code, session token)``."""
    from shared.proto import security_pb2 as spb
    from shared.proto import security_pb2_grpc as spb_grpc
    from shared.security.scram import ScramClient, mechanism

    client = ScramClient(mechanism("SCRAM-SHA-512"), user, password)
    with sync_channel(address, OPTIONS, tls=TlsFiles(ca)) as ch:
        stub = spb_grpc.SaslStub(ch)
        first = stub.Authenticate(spb.SaslAuthenticateRequest(mechanism="SCRAM-SHA-512", auth_bytes=client.first()),
                                  timeout=10)
        if first.error_code:
            return first.error_code, ""
        final = stub.Authenticate(spb.SaslAuthenticateRequest(
            mechanism="SCRAM-SHA-512", auth_bytes=client.final(first.auth_bytes), handshake_id=first.handshake_id),
            timeout=10)
        return final.error_code, final.session_token


def test_the_admin_password_logs_in_on_a_client_port(secure: Cluster) -> None:
    s = security(secure)
    password = open(s["admin_password_file"]).read().strip()
    address = secure.procs("broker")[0].info["client_address"]
    code, token = scram_login(address, s["ca"], s["admin_user"], password)
    assert code == 0 and token
    assert scram_login(address, s["ca"], s["admin_user"], password + "x")[0] == 58  # SASL_AUTHENTICATION_FAILED


def test_compose_secure_profile(tmp_path: Any) -> None:
    """deploy/compose.secure.yaml on top of compose.yaml: every Tidelog service runs SSL with its own
    certificate, which deploy/pki.py issues naming the host it advertises; etcd takes only certificates."""
    import shutil

    import yaml
    from cryptography import x509

    from shared.security import certs

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    tool = shutil.which("docker-compose")
    if tool is None:
        pytest.skip("docker-compose not installed")
    r = subprocess.run([tool, "-f", "deploy/compose.yaml", "-f", "deploy/compose.secure.yaml", "--profile", "secure",
                        "config"], capture_output=True, text=True, cwd=repo, timeout=60)
    assert r.returncode == 0, r.stderr
    services = yaml.safe_load(r.stdout)["services"]
    assert "--client-cert-auth" in services["etcd"]["command"]
    assert all(u.partition("=")[2].startswith("https://") for u in services["etcd"]["command"] if "client-urls" in u)
    subprocess.run([sys.executable, os.path.join(repo, "deploy", "pki.py"), "certs", str(tmp_path)], check=True,
                   cwd=repo, env={**os.environ, "PYTHONPATH": repo}, capture_output=True)
    for name, svc in services.items():
        if name in ("broker", "console", "pki", "admin-user", "etcd") or "monitoring" in svc.get("profiles", []):
            continue
        env = svc["environment"]
        assert env["TIDELOG_SECURITY_PROTOCOL"] == "SSL", name
        cert = certs.load_certificate(os.path.join(str(tmp_path), os.path.basename(env["TIDELOG_SSL_CERTFILE"])))
        advertised = svc["command"][svc["command"].index("--advertised-host") + 1] if "--advertised-host" in \
            svc["command"] else None
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.DNSName)
        if advertised:
            assert advertised in sans, (name, advertised, sans)
        assert f"User:{certs.subject_dn(cert)}" in env["TIDELOG_SUPER_USERS"].split(";"), name
    assert "secure" not in services["console"].get("profiles", [])  # no console in the secure stack


def test_a_certificate_client_uses_the_printed_mutual_tls_bootstrap(secure: Cluster) -> None:
    """``up --secure`` prints two gRPC bootstraps: a client with a certificate (security_protocol='SSL')
    is its certificate's principal on the mutual-TLS ports (the admin's maps to User:admin, a super user);
    the same client on the client TLS ports presents nothing (gRPC cannot ask for an optional certificate)
    and is ANONYMOUS there, refused by the ACLs like any unauthenticated caller."""
    from shared.cli.cluster_cmds import how_to_connect
    from shared.client import Admin, Consumer, Producer, TopicPartition
    from shared.errors import ErrorCode, TidelogError

    text = how_to_connect(secure.info)
    broker = secure.procs("broker")[0]
    assert f"bootstrap_servers='{broker.address}'" in text  # the mutual-TLS port, for certificates
    assert f"bootstrap_servers='{broker.info['client_address']}'" in text  # the client port, for SCRAM
    s = security(secure)
    cert = {"security_protocol": "SSL", "ssl_cafile": s["ca"], "ssl_certfile": s["admin_cert"],
            "ssl_keyfile": s["admin_key"]}
    with Admin(broker.address, **cert) as admin:
        admin.create_topic("by-certificate", 1, 1)
    with Producer(broker.address, **cert) as p:
        md = p.send("by-certificate", b"signed").get(timeout=30)
    with Consumer(broker.address, **cert) as c:
        tp = TopicPartition("by-certificate", md.partition)
        c.assign([tp])
        c.seek(tp, md.offset)
        assert [r.value for r in c.poll(timeout_ms=10_000)] == [b"signed"]
    with pytest.raises(TidelogError) as refused:
        with Producer(broker.info["client_address"], max_block_ms=5000, **cert) as p:
            p.send("by-certificate", b"anonymous").get(timeout=30)
    assert refused.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
