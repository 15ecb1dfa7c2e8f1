"""``tidelog bench`` on a secure cluster: the command's credentials reach every client it builds.

The settings are kafka-python's names (``connect.client_settings()``); the Kafka door gets librdkafka's.
"""

from __future__ import annotations

from typing import Any

import pytest

from shared.cli import bench, bench_kafka, connect
from shared.errors import ErrorCode, error_for

SASL = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "bench",
        "sasl_plain_password": "secret", "ssl_cafile": "/pki/ca.crt"}


@pytest.fixture
def settings() -> Any:
    connect.use_settings(dict(SASL))
    yield
    connect.use_settings({})


def test_kafka_security_plaintext_is_empty() -> None:
    assert bench_kafka.kafka_security({}) == {}
    assert bench_kafka.kafka_security({"security_protocol": "PLAINTEXT"}) == {}


def test_kafka_security_sasl_ssl() -> None:
    assert bench_kafka.kafka_security(SASL) == {
        "security.protocol": "SASL_SSL", "ssl.ca.location": "/pki/ca.crt", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "bench", "sasl.password": "secret"}


def test_kafka_security_mtls_has_no_sasl() -> None:
    conf = bench_kafka.kafka_security({"security_protocol": "ssl", "ssl_cafile": "ca", "ssl_certfile": "c",
                                       "ssl_keyfile": "k", "sasl_plain_username": "ignored"})
    assert conf == {"security.protocol": "SSL", "ssl.ca.location": "ca", "ssl.certificate.location": "c",
                    "ssl.key.location": "k"}


class FakeAdmin:
    """Records how it was built; create_topic answers ``code`` (0: created)."""

    built: list[dict[str, Any]] = []
    code = 0

    def __init__(self, servers: str, **kw: Any) -> None:
        FakeAdmin.built.append(kw)

    def create_topic(self, *_a: Any) -> None:
        if FakeAdmin.code:
            raise error_for(FakeAdmin.code, "refused")

    def close(self) -> None:
        pass


@pytest.mark.parametrize("code", [0, ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                  ErrorCode.CLUSTER_AUTHORIZATION_FAILED])
def test_ensure_topic_uses_the_credentials_and_tolerates_no_create_right(
        monkeypatch: pytest.MonkeyPatch, settings: None, code: int) -> None:
    FakeAdmin.built, FakeAdmin.code = [], int(code)
    monkeypatch.setattr(bench, "Admin", FakeAdmin)
    bench._ensure_topic("127.0.0.1:1", "bench-t", 1, 1, 1024)
    assert FakeAdmin.built == [SASL]


def test_ensure_topic_other_errors_raise(monkeypatch: pytest.MonkeyPatch, settings: None) -> None:
    FakeAdmin.built, FakeAdmin.code = [], int(ErrorCode.INVALID_REPLICATION_FACTOR)
    monkeypatch.setattr(bench, "Admin", FakeAdmin)
    with pytest.raises(Exception, match="refused"):
        bench._ensure_topic("127.0.0.1:1", "bench-t", 1, 3, 1024)


def test_bench_consumer_gets_the_credentials(monkeypatch: pytest.MonkeyPatch, settings: None) -> None:
    got: dict[str, Any] = {}

    class FakeConsumer:
        def __init__(self, servers: str, **kw: Any) -> None:
            got.update(kw)

        def subscribe(self, topics: list[str]) -> None:
            got["subscribed"] = topics

    monkeypatch.setattr(bench, "Consumer", FakeConsumer)
    bench.bench_consumer("127.0.0.1:1", "bench-t", "cid", 1 << 20, 1 << 20, 500, 4, "bench-g")
    assert {k: got[k] for k in SASL} == SASL
    assert got["subscribed"] == ["bench-t"]


def test_plaintext_adds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    connect.use_settings({})
    FakeAdmin.built, FakeAdmin.code = [], 0
    monkeypatch.setattr(bench, "Admin", FakeAdmin)
    bench._ensure_topic("127.0.0.1:1", "t", 1, 1, 1024)
    assert FakeAdmin.built == [{}]
