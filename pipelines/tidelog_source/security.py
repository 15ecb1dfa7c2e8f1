"""Security options of the ``tidelog`` source and sink, with spark-sql-kafka's (Kafka's) names.

Pure: parsing and validation; ``SecurityOptions`` then gives the Python client's settings (kafka-python's
names) or a ``ClientSecurity`` for a ``ClusterClient``.

* ``kafka.security.protocol``: ``PLAINTEXT`` (the default), ``SSL`` or ``SASL_SSL``. ``SASL_PLAINTEXT`` is
  refused: Tidelog sends credentials over TLS only.
* ``kafka.sasl.mechanism``: ``SCRAM-SHA-512`` (the default) or ``SCRAM-SHA-256``.
* ``kafka.sasl.jaas.config``: what spark-sql-kafka users write,
  ``org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="...";``
  (Kafka's JAAS syntax: one login module, a control flag, ``key=value`` pairs, values quoted or not,
  ``\\"`` and ``\\\\`` escapes in quoted values, a closing ``;``). Or, simpler, ``kafka.sasl.username`` and
  ``kafka.sasl.password`` (not both forms).
* The CA: Kafka's ``kafka.ssl.truststore.location`` is a JKS (or PKCS12) keystore, which a Python client cannot
  use: give the CA as PEM with ``kafka.ssl.ca.location`` (librdkafka's name) or ``kafka.ssl.cafile``
  (kafka-python's). A truststore or keystore option is refused with that advice.
* Mutual TLS: ``kafka.ssl.certificate.location`` and ``kafka.ssl.key.location`` (librdkafka's names; PEM,
  unencrypted key), or ``kafka.ssl.certfile`` / ``kafka.ssl.keyfile``.

The password never appears in a repr (the dataclass field is hidden) nor in Spark's plans (a Python data
source's options are not part of its plan strings).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipelines.tidelog_source.errors import OptionError

if TYPE_CHECKING:
    from shared.client.security import ClientSecurity

PROTOCOL = "kafka.security.protocol"
MECHANISM = "kafka.sasl.mechanism"
JAAS = "kafka.sasl.jaas.config"
USERNAME = "kafka.sasl.username"
PASSWORD = "kafka.sasl.password"
CA_NAMES = ("kafka.ssl.ca.location", "kafka.ssl.cafile")
CERT_NAMES = ("kafka.ssl.certificate.location", "kafka.ssl.certfile")
KEY_NAMES = ("kafka.ssl.key.location", "kafka.ssl.keyfile")
#: Kafka's JKS/PKCS12 stores and encrypted keys: refused with what to give instead
UNSUPPORTED = {
    "kafka.ssl.truststore.location": "give the cluster's CA certificate as PEM with kafka.ssl.ca.location",
    "kafka.ssl.truststore.password": "give the cluster's CA certificate as PEM with kafka.ssl.ca.location",
    "kafka.ssl.keystore.location": "give the client certificate and key as PEM with kafka.ssl.certificate.location "
                                   "and kafka.ssl.key.location",
    "kafka.ssl.keystore.password": "give an unencrypted PEM key with kafka.ssl.key.location",
    "kafka.ssl.key.password": "give an unencrypted PEM key with kafka.ssl.key.location",
}
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")


@dataclass(frozen=True)
class SecurityOptions:
    """How the source's and sink's clients connect (PLAINTEXT: as always, nothing more)."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None

    @property
    def secure(self) -> bool:
        return self.protocol != "PLAINTEXT"

    def client_settings(self) -> dict[str, Any]:
        """kafka-python's keyword arguments for ``Producer`` / ``Consumer`` / ``Admin`` (``{}`` when plaintext)."""
        if not self.secure:
            return {}
        out: dict[str, Any] = {"security_protocol": self.protocol, "ssl_cafile": self.cafile}
        if self.certfile:
            out.update(ssl_certfile=self.certfile, ssl_keyfile=self.keyfile)
        if self.protocol == "SASL_SSL":
            out.update(sasl_mechanism=self.mechanism, sasl_plain_username=self.username,
                       sasl_plain_password=self.password)
        return out

    def client_security(self) -> ClientSecurity | None:
        """The ``ClientSecurity`` for a ``ClusterClient`` (None when plaintext): one per process and settings,
        so the clients of the tasks a Python worker runs share their SCRAM sessions."""
        if not self.secure:
            return None
        with _lock:
            sec = _securities.get(self)
            if sec is None:
                from shared.client.security import client_security

                sec = _securities[self] = client_security(**self.client_settings())
            return sec

    def check_files(self) -> None:
        """On the driver, before any task: every named PEM file is there and readable."""
        for names, path in ((CA_NAMES, self.cafile), (CERT_NAMES, self.certfile), (KEY_NAMES, self.keyfile)):
            if path and not os.access(path, os.R_OK):
                raise OptionError(f"option {names[0]}: cannot read {path!r}")


_lock = threading.Lock()
_securities: dict[SecurityOptions, Any] = {}


def _first(opts: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    given = [n for n in names if opts.get(n)]
    if len(given) > 1:
        raise OptionError(f"options {' and '.join(given)} name the same file: give one")
    return opts[given[0]].strip() if given else None


def parse_jaas_config(text: str) -> tuple[str, str, dict[str, str]]:
    """Kafka's ``sasl.jaas.config``: ``LoginModuleClass flag key=value ... ;`` (exactly one module, as Kafka's
    clients require) -> (class, flag, options). Values may be quoted (``\\"`` and ``\\\\`` escape) or bare."""
    tokens: list[tuple[str, str]] = []  # (kind, text): word | string | = | ;
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "=;":
            tokens.append((c, c))
            i += 1
        elif c == '"':
            out = []
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                out.append(text[i])
                i += 1
            if i >= n:
                raise OptionError(f"option {JAAS}: a quoted value is not closed")
            tokens.append(("string", "".join(out)))
            i += 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in '=;"':
                j += 1
            tokens.append(("word", text[i:j]))
            i = j
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word":
        raise OptionError(f"option {JAAS} must read '{SCRAM_LOGIN_MODULE} required username=\"...\" "
                          f"password=\"...\";'")
    module, flag = tokens[0][1], tokens[1][1]
    if flag.lower() not in CONTROL_FLAGS:
        raise OptionError(f"option {JAAS}: {flag!r} is no login module control flag ({', '.join(CONTROL_FLAGS)})")
    values: dict[str, str] = {}
    k = 2
    while k < len(tokens) and tokens[k][0] != ";":
        if (k + 2 >= len(tokens) or tokens[k][0] != "word" or tokens[k + 1][0] != "="
                or tokens[k + 2][0] not in ("word", "string")):
            raise OptionError(f"option {JAAS}: expected key=\"value\" pairs after the control flag")
        values[tokens[k][1]] = tokens[k + 2][1]
        k += 3
    if k >= len(tokens):
        raise OptionError(f"option {JAAS} must end with ';'")
    if k + 1 != len(tokens):
        raise OptionError(f"option {JAAS} holds more than one login module: give exactly one, as Kafka requires")
    return module, flag.lower(), values


def parse_security_options(options: Mapping[str, str]) -> SecurityOptions:
    """The security options of ``options`` (any case of the names, as Spark's options)."""
    opts = {k.lower(): v for k, v in options.items()}
    for name, advice in UNSUPPORTED.items():
        if opts.get(name):
            raise OptionError(f"option {name} is not supported (a Java keystore setting): {advice}")
    raw_protocol = opts.get(PROTOCOL)
    protocol = (raw_protocol or "PLAINTEXT").strip().upper()
    if protocol == "SASL_PLAINTEXT":
        raise OptionError(f"option {PROTOCOL}=SASL_PLAINTEXT is not supported: Tidelog takes credentials over TLS "
                          "only; use SASL_SSL")
    if protocol not in PROTOCOLS:
        raise OptionError(f"option {PROTOCOL} must be one of {', '.join(PROTOCOLS)}, got {raw_protocol!r}")
    cafile = _first(opts, CA_NAMES)
    certfile = _first(opts, CERT_NAMES)
    keyfile = _first(opts, KEY_NAMES)
    sasl_given = [n for n in (MECHANISM, JAAS, USERNAME, PASSWORD) if opts.get(n)]
    if protocol == "PLAINTEXT":
        ssl_given = [n for n in (*CA_NAMES, *CERT_NAMES, *KEY_NAMES) if opts.get(n)]
        if sasl_given or ssl_given:
            raise OptionError(f"option {(sasl_given + ssl_given)[0]} needs {PROTOCOL}=SASL_SSL or SSL "
                              f"(it is {raw_protocol or 'PLAINTEXT, the default'})")
        return SecurityOptions()
    if not cafile:
        raise OptionError(f"{PROTOCOL}={protocol} needs the cluster's CA certificate (PEM): option "
                          f"{CA_NAMES[0]} (or {CA_NAMES[1]}); Kafka's JKS truststore is not supported")
    if (certfile is None) != (keyfile is None):
        raise OptionError(f"options {CERT_NAMES[0]} and {KEY_NAMES[0]} go together (mutual TLS)")
    if protocol == "SSL":
        if sasl_given:
            raise OptionError(f"option {sasl_given[0]} needs {PROTOCOL}=SASL_SSL (it is SSL)")
        return SecurityOptions("SSL", cafile=cafile, certfile=certfile, keyfile=keyfile)
    raw_mechanism = opts.get(MECHANISM)
    mechanism = (raw_mechanism or MECHANISMS[0]).strip().upper()
    if mechanism not in MECHANISMS:
        raise OptionError(f"option {MECHANISM} must be {' or '.join(MECHANISMS)}, got {raw_mechanism!r}")
    username, password = _credentials(opts)
    return SecurityOptions("SASL_SSL", mechanism, username, password, cafile, certfile, keyfile)


def _credentials(opts: Mapping[str, str]) -> tuple[str, str]:
    jaas = opts.get(JAAS)
    if jaas and (opts.get(USERNAME) or opts.get(PASSWORD)):
        raise OptionError(f"give either {JAAS} or {USERNAME} / {PASSWORD}, not both")
    if jaas:
        module, _, values = parse_jaas_config(jaas)
        if module.rsplit(".", 1)[-1] != "ScramLoginModule":
            raise OptionError(f"option {JAAS} names {module}: the tidelog source authenticates with SCRAM, "
                              f"use {SCRAM_LOGIN_MODULE}")
        if values.get("tokenauth", "false").lower() == "true":
            raise OptionError(f"option {JAAS}: delegation tokens (tokenauth=true) are not supported")
        username, password, where = values.get("username"), values.get("password"), JAAS
    else:
        username, password, where = opts.get(USERNAME), opts.get(PASSWORD), f"{USERNAME} / {PASSWORD}"
        if not username and not password:
            raise OptionError(f"{PROTOCOL}=SASL_SSL needs credentials: option {JAAS} "
                              f"('{SCRAM_LOGIN_MODULE} required username=\"...\" password=\"...\";') or "
                              f"{USERNAME} and {PASSWORD}")
    if not username:
        raise OptionError(f"option {JAAS if where == JAAS else USERNAME} gives no username")
    if not password:
        raise OptionError(f"option {JAAS if where == JAAS else PASSWORD} gives no password for user {username!r}")
    return username, password


def jaas_config(username: str, password: str) -> str:
    """``kafka.sasl.jaas.config`` for a SCRAM user (quotes and backslashes escaped)."""
    def quote(v: str) -> str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return f"{SCRAM_LOGIN_MODULE} required username={quote(username)} password={quote(password)};"


def spark_options(settings: Mapping[str, Any]) -> dict[str, str]:
    """The source's and sink's options for kafka-python's settings (``shared.cli.connect.client_settings``):
    ``{}`` for plaintext."""
    protocol = str(settings.get("security_protocol") or "PLAINTEXT").upper()
    if protocol == "PLAINTEXT":
        return {}
    out = {PROTOCOL: protocol, CA_NAMES[0]: str(settings["ssl_cafile"])}
    if settings.get("ssl_certfile"):
        out[CERT_NAMES[0]] = str(settings["ssl_certfile"])
        out[KEY_NAMES[0]] = str(settings["ssl_keyfile"])
    if protocol == "SASL_SSL":
        out[MECHANISM] = str(settings.get("sasl_mechanism") or MECHANISMS[0])
        out[JAAS] = jaas_config(str(settings["sasl_plain_username"]), str(settings["sasl_plain_password"]))
    return out
