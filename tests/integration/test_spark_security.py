"""The ``tidelog`` Spark source and sink on a secure cluster (``tidelog up --secure``), with spark-sql-kafka's
option names: a SCRAM user with ACLs on one topic reads it (``kafka.sasl.jaas.config``) and writes to it
(``kafka.sasl.username`` / ``kafka.sasl.password``); a user without ACLs is refused with
TOPIC_AUTHORIZATION_FAILED; the data dir's admin (what the example jobs use) needs no option at all.

One small cluster for the module (controller, broker, coordinator; real etcd with TLS), the Spark session of
test_spark.py (local[2] on loopback)."""

from __future__ import annotations

import ssl
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from pipelines.spark import connection_from
from shared.client import Producer
from tests.conftest import Cluster, kill_cluster, start_cluster
from tests.integration.test_spark import spark  # noqa: F401  (the shared Spark session)

pytestmark = pytest.mark.timeout(180)

TOPIC = f"spark-sec-{uuid.uuid4().hex[:6]}"
PASSWORDS = {"alice": 'alice "secret"\\1', "bob": "bob-secret-1"}  # alice's has a quote and a backslash
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def rest(c: Cluster, method: str, path: str, body: dict[str, Any]) -> httpx.Response:
    """A REST call as the admin (HTTP Basic over the cluster's CA), waiting out the controller's start (503)."""
    sec = c.info["security"]
    password = open(sec["admin_password_file"]).read().strip()
    deadline = time.monotonic() + 30
    while True:
        r = httpx.request(method, c.info["rest"] + path, json=body, auth=(sec["admin_user"], password),
                          verify=ssl.create_default_context(cafile=sec["ca"]), timeout=30)
        if r.status_code != 503 or time.monotonic() > deadline:
            assert r.status_code in (200, 201), r.text
            return r
        time.sleep(0.2)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, list[bytes]]]:
    data_dir = str(tmp_path_factory.mktemp("spark-secure"))
    c = start_cluster(data_dir, secure=True, controllers=1, brokers=1, coordinators=1, cleaners=0, quotas=0,
                      extra_env={"TIDELOG_OFFSETS_TOPIC_NUM_PARTITIONS": "1",
                                 "TIDELOG_OFFSETS_TOPIC_REPLICATION_FACTOR": "1"})
    try:
        for name, password in PASSWORDS.items():
            rest(c, "POST", "/v1/users", {"name": name, "password": password, "mechanism": "SCRAM-SHA-512"})
        rest(c, "POST", "/v1/topics", {"name": TOPIC, "partitions": 2, "replication_factor": 1, "configs": {}})
        rest(c, "POST", "/v1/acls", {"acls": [
            {"resource_type": "TOPIC", "resource_name": TOPIC, "pattern_type": "LITERAL", "principal": "User:alice",
             "host": "*", "operation": op, "permission_type": "ALLOW"} for op in ("READ", "WRITE", "DESCRIBE")]})
        # the rows, written as the data dir's admin (how the example jobs connect: no option)
        conn = connection_from(data_dir, None)
        assert conn.settings["sasl_plain_username"] == "admin" and conn.servers == c.procs("broker")[0].info["client_address"]
        values = [f"row{i}".encode() for i in range(50)]
        with Producer(conn.servers, linger_ms=2, **conn.settings) as p:
            for f in [p.send(TOPIC, v, key=v[-1:]) for v in values]:
                f.get(30)
        yield c, values
    finally:
        kill_cluster(c)


def brokers(c: Cluster) -> str:
    return ",".join(p.info["client_address"] for p in c.procs("broker"))  # the TLS ports


def sasl_options(c: Cluster, user: str) -> dict[str, str]:
    """As a spark-sql-kafka user writes them (the CA as PEM: librdkafka's kafka.ssl.ca.location)."""
    password = PASSWORDS[user].replace("\\", "\\\\").replace('"', '\\"')
    return {"bootstrap.servers": brokers(c), "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.ssl.ca.location": c.info["security"]["ca"],
            "kafka.sasl.jaas.config": f'{SCRAM} required username="{user}" password="{password}";'}


def values_of(df: Any) -> list[bytes]:
    return sorted(bytes(r.value) for r in df.select("value").collect())


def test_user_with_acls_reads_the_topic(secure, spark) -> None:  # noqa: F811
    c, values = secure
    df = (spark.read.format("tidelog").options(**sasl_options(c, "alice")).option("subscribe", TOPIC)
          .option("startingOffsets", "earliest").load())
    assert values_of(df) == sorted(values)
    plan = df._jdf.queryExecution().toString()  # the options (and the password) are not in Spark's plans
    assert "tidelog" in plan and PASSWORDS["alice"] not in plan and "secret" not in plan


def test_user_writes_through_the_sink_and_the_rows_land(secure, spark) -> None:  # noqa: F811
    c, values = secure
    new = [f"spark-{i}" for i in range(20)]
    (spark.createDataFrame([(v,) for v in new], "value string").write.format("tidelog").mode("append")
     .option("bootstrap.servers", brokers(c)).option("topic", TOPIC)
     .option("kafka.security.protocol", "SASL_SSL").option("kafka.ssl.ca.location", c.info["security"]["ca"])
     .option("kafka.sasl.username", "alice").option("kafka.sasl.password", PASSWORDS["alice"]).save())
    conn = connection_from(c.lc.spec.data_dir, None)  # read back as the data dir's admin, with no option of ours
    got = values_of(spark.read.format("tidelog").options(**conn.options).option("subscribe", TOPIC)
                    .option("startingOffsets", "earliest").load())
    assert got == sorted(values + [v.encode() for v in new])


def test_user_without_acls_is_refused_by_name(secure, spark) -> None:  # noqa: F811
    c, _ = secure
    with pytest.raises(Exception) as exc:
        (spark.read.format("tidelog").options(**sasl_options(c, "bob")).option("subscribe", TOPIC)
         .option("startingOffsets", "earliest").load().collect())
    text = str(exc.value)
    assert "TOPIC_AUTHORIZATION_FAILED" in text and f"not authorized to access topic '{TOPIC}' as User:bob" in text
    assert PASSWORDS["bob"] not in text
    wrong = {**sasl_options(c, "alice"), "kafka.sasl.jaas.config": f'{SCRAM} required username="alice" password="nope-7";'}
    with pytest.raises(Exception) as exc:
        spark.read.format("tidelog").options(**wrong).option("subscribe", TOPIC).load().collect()
    assert "SASL_AUTHENTICATION_FAILED" in str(exc.value) and "nope-7" not in str(exc.value)



def jvm_options(c: Cluster, user: str) -> dict[str, str]:
    """``sasl_options`` for ``format("tidelog-jvm")``: the brokers' Kafka listeners (SASL_SSL here)."""
    opts = sasl_options(c, user)
    del opts["bootstrap.servers"]
    return {**opts, "kafka.bootstrap.servers": ",".join(p.info["kafka"] for p in c.procs("broker"))}


def test_the_jvm_reader_and_writer_sign_in_with_scram_over_tls(secure, spark) -> None:  # noqa: F811
    c, values = secure
    df = spark.read.format("tidelog-jvm").options(**jvm_options(c, "alice")).option("subscribe", TOPIC).load()
    python = spark.read.format("tidelog").options(**sasl_options(c, "alice")).option("subscribe", TOPIC).load()
    got = values_of(df)
    assert got == values_of(python) and set(values) <= set(got)
    plan = df._jdf.queryExecution().toString()
    assert "tidelog-jvm" in plan and PASSWORDS["alice"] not in plan and "secret" not in plan
    # writes as alice, with kafka.sasl.username / kafka.sasl.password and SCRAM-SHA-512
    new = [f"jvm-{i}" for i in range(30)]
    (spark.createDataFrame([(v,) for v in new], "value string").write.format("tidelog-jvm").mode("append")
     .option("kafka.bootstrap.servers", jvm_options(c, "alice")["kafka.bootstrap.servers"]).option("topic", TOPIC)
     .option("kafka.security.protocol", "SASL_SSL").option("kafka.ssl.ca.location", c.info["security"]["ca"])
     .option("kafka.sasl.username", "alice").option("kafka.sasl.password", PASSWORDS["alice"]).save())
    assert {v.encode() for v in new} <= set(values_of(df))
    # bob may not, a wrong password is refused by name, a missing CA before any task
    for opts, message in (
            (jvm_options(c, "bob"), "TOPIC_AUTHORIZATION_FAILED"),
            ({**jvm_options(c, "alice"), "kafka.sasl.jaas.config": f'{SCRAM} required username="alice" password="nope-7";'},
             "SASL_AUTHENTICATION_FAILED"),
            ({k: v for k, v in jvm_options(c, "alice").items() if k != "kafka.ssl.ca.location"}, "needs the cluster's CA"),
            ({**jvm_options(c, "alice"), "kafka.security.protocol": "PLAINTEXT"}, "needs kafka.security.protocol=SASL_SSL"),
    ):
        with pytest.raises(Exception) as exc:
            spark.read.format("tidelog-jvm").options(**opts).option("subscribe", TOPIC).load().collect()
        assert message in str(exc.value) and "nope-7" not in str(exc.value) and PASSWORDS["bob"] not in str(exc.value)
    for user, opts, message in (
            ("bob", jvm_options(c, "bob"), "TOPIC_AUTHORIZATION_FAILED"),
            ("alice", {**jvm_options(c, "alice"), "kafka.sasl.jaas.config":
                       f'{SCRAM} required username="alice" password="nope-7";'}, "SASL_AUTHENTICATION_FAILED")):
        started = time.monotonic()
        with pytest.raises(Exception) as exc:
            (spark.createDataFrame([("x",)], "value string").write.format("tidelog-jvm").mode("append")
             .options(**opts).option("kafka.delivery.timeout.ms", "600000").option("topic", TOPIC).save())
        assert message in str(exc.value), user
        assert time.monotonic() - started < 60, "refused at once, not retried until the delivery timeout (10 min)"
