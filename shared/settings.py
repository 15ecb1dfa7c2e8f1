"""Typed service settings: flags and ``TIDELOG_*`` environment variables, validated at start.

Every service's settings class derives from ``ServiceSettings``; flags take
precedence over the environment, which takes precedence over defaults. A bad
value prints a message naming the setting and exits with status 2.
"""

from __future__ import annotations

import socket
import sys
from typing import TypeVar

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

T = TypeVar("T", bound="ServiceSettings")


def parse_endpoint(value: str) -> tuple[str, int]:
    """``host:port`` → ``(host, port)``; raises ValueError with a readable message."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port, got {value!r}")
    return host, int(port)


class ServiceSettings(BaseSettings):
    """Settings every Tidelog service takes."""

    model_config = SettingsConfigDict(
        env_prefix="TIDELOG_",
        cli_kebab_case=True,
        cli_exit_on_error=True,
        cli_implicit_flags=True,
        extra="ignore",
    )

    id: int = Field(1, ge=0, description="this instance's id (unique per role)")
    host: str = Field("127.0.0.1", description="address to listen on and advertise")
    port: int = Field(0, ge=0, le=65535, description="gRPC port (0: any free port)")
    advertised_host: str | None = Field(None, description="host to advertise if different from --host")
    etcd: str = Field("127.0.0.1:2379", description="etcd client endpoint host:port")
    cluster: str = Field("tidelog", pattern=r"^[A-Za-z0-9._-]{1,64}$", description="cluster name (etcd key prefix)")
    data_dir: str = Field("./data", description="directory for this instance's files")
    etcd_connection_timeout_ms: int = Field(30_000, ge=100, le=600_000,
                                            description="how long to keep trying to reach etcd at start before "
                                                        "exiting (as Kafka's zookeeper.connection.timeout.ms)")
    session_timeout_ms: int = Field(6000, ge=1000, le=600_000, description="etcd lease TTL for registration")
    log_level: str = Field("INFO", pattern=r"^(DEBUG|INFO|WARNING|ERROR)$", description="log level")
    ready_file: str | None = Field(None, description="write {address, pid} here as JSON once serving")
    metrics_port: int = Field(0, ge=-1, le=65535, description="/metrics HTTP port (0: any free port, -1: off)")
    lifeline_fd: int | None = Field(None, ge=0, description="stop when this pipe reaches end of file "
                                                               "(the launcher holds its other end)")
    # -- security (issue 23): PLAINTEXT is the default and changes nothing --
    security_protocol: str = Field("PLAINTEXT", pattern=r"^(PLAINTEXT|SSL)$",
                                   description="PLAINTEXT, or SSL: mutual TLS on --port, TLS on --client-port, "
                                               "etcd over TLS with this service's certificate, ACLs enforced")
    ssl_cafile: str | None = Field(None, description="PEM CA certificate(s) that verify peers (SSL)")
    ssl_certfile: str | None = Field(None, description="this service's PEM certificate, CN=<role>-<id>,OU=tidelog-service (SSL)")
    ssl_keyfile: str | None = Field(None, validate_default=True, description="this service's PEM private key (SSL)")
    client_port: int = Field(0, ge=0, le=65535, description="SSL only: the client-facing TLS port, no client "
                                                             "certificate (0: any free port)")
    super_users: str = Field("", description="Kafka's super.users: principals separated by ';' "
                                             "(User:admin;User:CN=broker-1,OU=tidelog-service)")
    ssl_principal_mapping_rules: str = Field("DEFAULT", description="Kafka's ssl.principal.mapping.rules")
    connection_creation_rate: float | None = Field(
        None, ge=0, description="Kafka's per-IP quota connection_creation_rate: new connections per second per host "
                                "on the client doors (gRPC client port, Kafka listener; burst: one second's worth); "
                                "0: unlimited; default: unlimited when PLAINTEXT, 200 when SSL")
    audit_log_max_bytes: int = Field(100 * 1024 * 1024, ge=0,
                                     description="size at which <data-dir>/audit.log is rotated (0: never)")
    audit_log_backups: int = Field(5, ge=0, le=1000, description="rotated audit logs kept (audit.log.1 ... .N); "
                                                                 "0: no rotation")
    allow_everyone_if_no_acl_found: bool | None = Field(
        None, description="Kafka's allow.everyone.if.no.acl.found (default: true when PLAINTEXT, false when SSL)")

    @field_validator("etcd")
    @classmethod
    def _check_etcd(cls, v: str) -> str:
        parse_endpoint(v)
        return v

    @field_validator("security_protocol", mode="before")
    @classmethod
    def _upper_protocol(cls, v: object) -> object:
        return v.upper() if isinstance(v, str) else v

    @field_validator("ssl_keyfile")
    @classmethod
    def _check_ssl(cls, v: str | None, info: ValidationInfo) -> str | None:
        d = info.data
        if d.get("security_protocol") == "SSL" and not (d.get("ssl_cafile") and d.get("ssl_certfile") and v):
            raise ValueError("security_protocol SSL needs ssl_cafile, ssl_certfile and ssl_keyfile")
        return v

    @property
    def secure(self) -> bool:
        return self.security_protocol == "SSL"

    @property
    def etcd_endpoint(self) -> tuple[str, int]:
        return parse_endpoint(self.etcd)

    @property
    def session_timeout_s(self) -> int:
        return max(1, round(self.session_timeout_ms / 1000))

    @property
    def advertised(self) -> str:
        """The host others should dial: --advertised-host, else the host name when listening on all interfaces."""
        if self.advertised_host:
            return self.advertised_host
        if self.host in ("0.0.0.0", "::", ""):
            return socket.gethostname()
        return self.host


def load_settings(cls: type[T], argv: list[str] | None = None, prog: str | None = None) -> T:
    """Parse flags and environment into ``cls``; on error print why and exit 2."""
    args = sys.argv[1:] if argv is None else argv
    try:
        return cls(_cli_parse_args=args, _cli_prog_name=prog)  # type: ignore[call-arg]
    except ValidationError as exc:
        lines = [f"{prog or cls.__name__}: invalid settings:"]
        for err in exc.errors():
            name = ".".join(str(p) for p in err["loc"]).replace("_", "-")
            lines.append(f"  --{name} / TIDELOG_{name.upper().replace('-', '_')}: {err['msg']} (got {err.get('input')!r})")
        print("\n".join(lines), file=sys.stderr)
        raise SystemExit(2) from None
