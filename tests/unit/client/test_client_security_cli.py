"""Where the CLI takes its credentials (shared.cli.connect): cluster.json's ``security`` block (the admin
user and its password file, the CA) or TIDELOG_SASL_USERNAME / TIDELOG_SASL_PASSWORD; a plaintext
cluster needs none, and a secure one's brokers are dialled on their client ports."""

from __future__ import annotations

import json
import os
from typing import Any

import click
import pytest

from shared.cli import connect


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Any:
    for name in (connect.SASL_USERNAME_ENV, connect.SASL_PASSWORD_ENV, connect.SASL_MECHANISM_ENV,
                 connect.SSL_CAFILE_ENV):
        monkeypatch.delenv(name, raising=False)
    yield
    connect.use_settings({})


def _cluster(tmp_path: Any, secure: bool) -> str:
    procs = [{"role": "broker", "id": 1, "address": "127.0.0.1:9001",
              **({"client_address": "127.0.0.1:9101"} if secure else {})},
             {"role": "controller", "id": 1, "address": "127.0.0.1:9002"}]
    info: dict[str, Any] = {"processes": procs, "rest": "https://127.0.0.1:8080" if secure else "http://127.0.0.1:8080"}
    if secure:
        pw = tmp_path / "admin.password"
        pw.write_text("s3cret\n")
        os.chmod(pw, 0o600)
        info["security"] = {"protocol": "SSL", "ca": str(tmp_path / "ca.crt"), "admin_user": "admin",
                            "admin_password_file": str(pw)}
    (tmp_path / "cluster.json").write_text(json.dumps(info))
    return str(tmp_path)


def test_plaintext_cluster_needs_no_credentials(tmp_path: Any) -> None:
    data_dir = _cluster(tmp_path, secure=False)
    assert connect.resolve(None, None, data_dir) == ("127.0.0.1:9001", "http://127.0.0.1:8080")
    assert connect.client_settings() == {} and connect.client_security() is None and connect.http_options() == {}


def test_secure_cluster_gives_the_admin_over_sasl_ssl_on_client_ports(tmp_path: Any) -> None:
    data_dir = _cluster(tmp_path, secure=True)
    assert connect.resolve(None, None, data_dir) == ("127.0.0.1:9101", "https://127.0.0.1:8080")
    assert connect.client_settings() == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "admin",
        "sasl_plain_password": "s3cret", "ssl_cafile": str(tmp_path / "ca.crt")}
    assert connect.client_settings(data_dir) == connect.client_settings()


def test_environment_names_another_user(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = _cluster(tmp_path, secure=True)
    monkeypatch.setenv(connect.SASL_USERNAME_ENV, "alice")
    monkeypatch.setenv(connect.SASL_PASSWORD_ENV, "alice-pw")
    monkeypatch.setenv(connect.SASL_MECHANISM_ENV, "SCRAM-SHA-256")
    s = connect.client_settings(data_dir)
    assert (s["sasl_plain_username"], s["sasl_plain_password"], s["sasl_mechanism"]) == ("alice", "alice-pw", "SCRAM-SHA-256")
    # a remote cluster (no cluster.json): the CA must come from the environment too
    with pytest.raises(click.ClickException, match=connect.SSL_CAFILE_ENV):
        connect.settings_for(None)
    monkeypatch.setenv(connect.SSL_CAFILE_ENV, "/etc/tidelog/ca.crt")
    assert connect.settings_for(None)["ssl_cafile"] == "/etc/tidelog/ca.crt"
    monkeypatch.delenv(connect.SASL_PASSWORD_ENV)
    with pytest.raises(click.ClickException, match=connect.SASL_PASSWORD_ENV):
        connect.settings_for(None)


def test_unreadable_admin_password_says_what_to_do(tmp_path: Any) -> None:
    data_dir = _cluster(tmp_path, secure=True)
    os.unlink(tmp_path / "admin.password")
    with pytest.raises(click.ClickException, match=connect.SASL_USERNAME_ENV):
        connect.resolve(None, None, data_dir)
