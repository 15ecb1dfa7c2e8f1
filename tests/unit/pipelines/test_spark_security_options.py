"""The ``tidelog`` source's and sink's security options, with spark-sql-kafka's names (pure parsing)."""

from __future__ import annotations

import pytest

from pipelines.tidelog_source.options import OptionError, parse_options
from pipelines.tidelog_source.security import (
    SecurityOptions,
    jaas_config,
    parse_jaas_config,
    parse_security_options,
    spark_options,
)
from pipelines.tidelog_source.sink import parse_sink_options

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
BASE = {"bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}


def sasl(**extra: str) -> dict[str, str]:
    return {"kafka.security.protocol": "SASL_SSL", "kafka.ssl.ca.location": "/ca.pem", **extra}


@pytest.mark.parametrize("text, user, password", [
    (f'{SCRAM} required username="alice" password="alice-secret";', "alice", "alice-secret"),
    (f'{SCRAM} required\n  username="alice"\n  password="p w;=x";', "alice", "p w;=x"),  # spaces, ; and = quoted
    (f"{SCRAM} required username=alice password=s3cret;", "alice", "s3cret"),  # bare values
    (f'{SCRAM}   REQUIRED username = "alice" password = "a\\"b\\\\c" ;', "alice", 'a"b\\c'),  # escapes
    (f'{SCRAM} sufficient password="x" username="bob";', "bob", "x"),
])
def test_jaas_config_forms(text: str, user: str, password: str) -> None:
    sec = parse_security_options(sasl(**{"kafka.sasl.jaas.config": text}))
    assert (sec.protocol, sec.mechanism, sec.username, sec.password) == ("SASL_SSL", "SCRAM-SHA-512", user, password)
    assert sec.cafile == "/ca.pem"


def test_jaas_config_round_trips_what_the_jobs_build() -> None:
    for password in ("plain", 'qu"ote', "back\\slash", "semi;colon = x"):
        module, flag, values = parse_jaas_config(jaas_config("alice", password))
        assert (module, flag, values) == (SCRAM, "required", {"username": "alice", "password": password})


@pytest.mark.parametrize("text, fragment", [
    (f'{SCRAM} required username="alice" password="x"', "must end with ';'"),
    (f'{SCRAM} required username="alice" password="x', "not closed"),
    (f'{SCRAM} username="alice" password="x";', "control flag"),
    (f'{SCRAM} mandatory username="alice" password="x";', "control flag"),
    (f'{SCRAM} required username "alice";', "key=\"value\""),
    (f'{SCRAM} required username="a" password="x"; {SCRAM} required username="b" password="y";', "more than one"),
    ("garbage", "must read"),
])
def test_malformed_jaas_config_names_the_option(text: str, fragment: str) -> None:
    with pytest.raises(OptionError, match="kafka.sasl.jaas.config") as exc:
        parse_security_options(sasl(**{"kafka.sasl.jaas.config": text}))
    assert fragment in str(exc.value)


def test_plain_login_module_and_delegation_tokens_are_refused() -> None:
    plain = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="x";'
    with pytest.raises(OptionError, match="ScramLoginModule"):
        parse_security_options(sasl(**{"kafka.sasl.jaas.config": plain}))
    with pytest.raises(OptionError, match="tokenauth"):
        parse_security_options(sasl(**{"kafka.sasl.jaas.config":
                                       f'{SCRAM} required username="a" password="x" tokenauth="true";'}))


def test_missing_password_or_user() -> None:
    with pytest.raises(OptionError, match=r"kafka.sasl.jaas.config gives no password for user 'alice'"):
        parse_security_options(sasl(**{"kafka.sasl.jaas.config": f'{SCRAM} required username="alice";'}))
    with pytest.raises(OptionError, match="kafka.sasl.jaas.config gives no username"):
        parse_security_options(sasl(**{"kafka.sasl.jaas.config": f'{SCRAM} required password="x";'}))
    with pytest.raises(OptionError, match="kafka.sasl.password gives no password"):
        parse_security_options(sasl(**{"kafka.sasl.username": "alice"}))
    with pytest.raises(OptionError, match="needs credentials"):
        parse_security_options(sasl())
    with pytest.raises(OptionError, match="not both"):
        parse_security_options(sasl(**{"kafka.sasl.jaas.config": f'{SCRAM} required username="a" password="x";',
                                       "kafka.sasl.username": "a", "kafka.sasl.password": "x"}))


def test_username_and_password_options_and_mechanisms() -> None:
    sec = parse_security_options(sasl(**{"kafka.sasl.username": "bob", "kafka.sasl.password": "pw",
                                         "kafka.sasl.mechanism": "scram-sha-256"}))
    assert (sec.mechanism, sec.username, sec.password) == ("SCRAM-SHA-256", "bob", "pw")
    for bad in ("PLAIN", "GSSAPI", "OAUTHBEARER", "SCRAM-SHA-1"):
        with pytest.raises(OptionError, match=f"kafka.sasl.mechanism must be .*got '{bad}'"):
            parse_security_options(sasl(**{"kafka.sasl.mechanism": bad, "kafka.sasl.username": "a",
                                            "kafka.sasl.password": "x"}))


def test_bad_protocol() -> None:
    with pytest.raises(OptionError, match="kafka.security.protocol must be one of PLAINTEXT, SSL, SASL_SSL, got 'TLS'"):
        parse_security_options({"kafka.security.protocol": "TLS"})
    with pytest.raises(OptionError, match="SASL_PLAINTEXT is not supported.*SASL_SSL"):
        parse_security_options({"kafka.security.protocol": "SASL_PLAINTEXT"})
    with pytest.raises(OptionError, match="kafka.ssl.ca.location"):  # TLS without a CA
        parse_security_options({"kafka.security.protocol": "ssl"})


def test_plaintext_is_the_default_and_takes_no_credentials() -> None:
    assert parse_security_options({}) == SecurityOptions()
    assert parse_options(BASE, streaming=False).security == SecurityOptions()
    assert SecurityOptions().client_settings() == {} and SecurityOptions().client_security() is None
    with pytest.raises(OptionError, match="kafka.sasl.username needs kafka.security.protocol=SASL_SSL"):
        parse_security_options({"kafka.sasl.username": "a", "kafka.sasl.password": "x"})
    with pytest.raises(OptionError, match="kafka.sasl.jaas.config needs kafka.security.protocol=SASL_SSL or SSL"):
        parse_security_options({"kafka.security.protocol": "PLAINTEXT",
                                "kafka.sasl.jaas.config": f'{SCRAM} required username="a" password="x";'})


def test_ssl_with_client_certificate_and_pem_names() -> None:
    sec = parse_security_options({"kafka.security.protocol": "SSL", "kafka.ssl.cafile": "/ca.pem",
                                  "kafka.ssl.certificate.location": "/c.pem", "kafka.ssl.key.location": "/k.pem"})
    assert sec.client_settings() == {"security_protocol": "SSL", "ssl_cafile": "/ca.pem",
                                     "ssl_certfile": "/c.pem", "ssl_keyfile": "/k.pem"}
    with pytest.raises(OptionError, match="go together"):
        parse_security_options({"kafka.security.protocol": "SSL", "kafka.ssl.ca.location": "/ca.pem",
                                "kafka.ssl.certificate.location": "/c.pem"})
    with pytest.raises(OptionError, match="needs kafka.security.protocol=SASL_SSL"):
        parse_security_options({"kafka.security.protocol": "SSL", "kafka.ssl.ca.location": "/ca.pem",
                                "kafka.sasl.username": "a"})
    with pytest.raises(OptionError, match="kafka.ssl.ca.location and kafka.ssl.cafile"):
        parse_security_options({"kafka.security.protocol": "SSL", "kafka.ssl.ca.location": "/a",
                                "kafka.ssl.cafile": "/b"})


@pytest.mark.parametrize("name", ["kafka.ssl.truststore.location", "kafka.ssl.keystore.location",
                                  "kafka.ssl.key.password"])
def test_java_keystores_are_refused_with_the_pem_option_to_use(name: str) -> None:
    with pytest.raises(OptionError, match=f"option {name} is not supported.*kafka.ssl.(ca|certificate|key).location"):
        parse_security_options(sasl(**{name: "/x.jks", "kafka.sasl.username": "a", "kafka.sasl.password": "x"}))


def test_option_names_are_case_insensitive_as_spark_s() -> None:
    opts = {**BASE, "kafka.Security.Protocol": "SASL_SSL", "KAFKA.SSL.CA.LOCATION": "/ca.pem",
            "kafka.sasl.jaas.config": f'{SCRAM} required username="alice" password="pw";'}
    assert parse_options(opts, streaming=True).security.username == "alice"
    sink = parse_sink_options({"bootstrap.servers": "b:1", "topic": "t", **opts})
    assert sink.security.client_settings() == {
        "security_protocol": "SASL_SSL", "ssl_cafile": "/ca.pem", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice", "sasl_plain_password": "pw"}


def test_password_never_in_a_repr() -> None:
    opts = {**BASE, **sasl(**{"kafka.sasl.jaas.config": f'{SCRAM} required username="alice" password="hunter2-x";'})}
    for parsed in (parse_options(opts, streaming=False), parse_sink_options(opts)):
        assert "hunter2-x" not in repr(parsed) and "hunter2-x" not in str(parsed)
        assert "alice" in repr(parsed)


def test_spark_options_from_kafka_python_settings() -> None:
    assert spark_options({}) == {}
    settings = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "admin",
                "sasl_plain_password": 'p"w', "ssl_cafile": "/d/ca.pem"}
    opts = spark_options(settings)
    assert parse_security_options(opts).client_settings() == settings
    ssl = {"security_protocol": "SSL", "ssl_cafile": "/ca", "ssl_certfile": "/c", "ssl_keyfile": "/k"}
    assert parse_security_options(spark_options(ssl)).client_settings() == ssl


def test_unreadable_files_are_named_on_the_driver(tmp_path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    parse_security_options(sasl(**{"kafka.ssl.ca.location": str(ca), "kafka.sasl.username": "a",
                                   "kafka.sasl.password": "x"})).check_files()
    sec = parse_security_options(sasl(**{"kafka.ssl.ca.location": str(tmp_path / "nope.pem"),
                                         "kafka.sasl.username": "a", "kafka.sasl.password": "x"}))
    with pytest.raises(OptionError, match="option kafka.ssl.ca.location: cannot read"):
        sec.check_files()
