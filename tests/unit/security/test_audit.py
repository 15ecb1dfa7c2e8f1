"""The audit log: one JSON line per event in the configured file (0600), the logger without one, a counter
per kind and door, and a bounded queue that drops and counts instead of blocking the caller."""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from shared.security import audit


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    yield
    audit.configure(None)


def _count(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_events_are_json_lines_in_the_configured_file(tmp_path: Path) -> None:
    path = tmp_path / "data" / "audit.log"
    log = audit.configure(str(path))
    audit.event("authorization_denied", principal="User:mallory", host="10.0.0.7", door="grpc", operation="WRITE",
                resource="TOPIC:orders", detail="TOPIC_AUTHORIZATION_FAILED")
    audit.event("admin_change", principal="User:admin", host="127.0.0.1", door="rest", operation="CreateAcls",
                resource="TOPIC:LITERAL:orders", detail="User:alice ALLOW READ from *", allowed=True)
    assert log.flush()
    first, second = _lines(path)
    assert set(first) == {"ts", "kind", "principal", "host", "door", "operation", "resource", "detail", "allowed"}
    assert first["kind"] == "authorization_denied" and first["principal"] == "User:mallory"
    assert first["host"] == "10.0.0.7" and first["door"] == "grpc" and first["operation"] == "WRITE"
    assert first["resource"] == "TOPIC:orders" and first["allowed"] is False
    assert second["kind"] == "admin_change" and second["allowed"] is True
    assert first["ts"].endswith("Z") and datetime.fromisoformat(first["ts"]).utcoffset().total_seconds() == 0
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_default_path_is_in_the_data_dir() -> None:
    assert audit.default_path("/var/lib/tidelog/broker-1") == "/var/lib/tidelog/broker-1/audit.log"


def test_lines_append_across_configures(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    for who in ("User:a", "User:b"):
        log = audit.configure(str(path))
        audit.event("authentication_failure", principal=who, host="h", door="kafka", operation="SaslAuthenticate")
        assert log.flush()
    assert [e["principal"] for e in _lines(path)] == ["User:a", "User:b"]


def test_each_event_is_counted_by_kind_and_door(tmp_path: Path) -> None:
    audit.configure(str(tmp_path / "audit.log"))
    before = _count("tidelog_audit_events_total", kind="authentication_failure", door="rest")
    other = _count("tidelog_audit_events_total", kind="admin_change", door="rest")
    for _ in range(3):
        audit.event("authentication_failure", principal="User:x", host="h", door="rest", operation="GET /v1/topics")
    assert _count("tidelog_audit_events_total", kind="authentication_failure", door="rest") == before + 3
    assert _count("tidelog_audit_events_total", kind="admin_change", door="rest") == other


def test_unknown_kind_or_door_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown audit kind"):
        audit.event("login_failed", principal="User:x", host="h", door="rest", operation="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="doors: grpc, kafka, rest"):
        audit.event("admin_change", principal="User:x", host="h", door="http", operation="x")  # type: ignore[arg-type]


def test_without_configure_events_go_to_the_logger(caplog: pytest.LogCaptureFixture) -> None:
    log = audit.configure(None)
    with caplog.at_level(logging.INFO, logger="tidelog.audit"):
        audit.event("authorization_denied", principal="User:bob", host="::1", door="kafka", operation="READ",
                    resource="GROUP:g")
        assert log.flush()
    (record,) = [r for r in caplog.records if r.name == "tidelog.audit"]
    assert json.loads(record.getMessage())["principal"] == "User:bob"


def test_hostile_fields_cannot_break_or_bloat_a_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = audit.configure(str(path))
    audit.event("authorization_denied", principal="User:x\n{\"kind\":\"admin_change\"}", host="h", door="rest",
                operation="DELETE", resource="t" * 100_000)
    assert log.flush()
    (line,) = path.read_text().splitlines()
    got = json.loads(line)
    assert got["kind"] == "authorization_denied" and "\n" in got["principal"]
    assert len(got["resource"]) <= audit.FIELD_MAX + 3


class _StuckLog(audit.AuditLog):
    """A writer stuck on its first line (a slow disk), until released."""

    def __init__(self, path: str, maxsize: int) -> None:
        super().__init__(path, maxsize=maxsize)
        self.release = threading.Event()
        self.writing = threading.Event()

    def _write(self, line: str) -> None:
        self.writing.set()
        assert self.release.wait(30)
        super()._write(line)


def test_a_full_queue_drops_and_counts_instead_of_blocking(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = _StuckLog(str(path), maxsize=2)
    dropped_before = _count("tidelog_audit_events_dropped_total")
    assert log.submit({"ts": 0.0, "n": 0})
    assert log.writing.wait(10)  # the writer holds line 0; the queue (2) is empty again
    results = [log.submit({"ts": 0.0, "n": n}) for n in range(1, 101)]
    assert results[:2] == [True, True] and not any(results[2:])
    assert log.dropped == 98
    assert _count("tidelog_audit_events_dropped_total") == dropped_before + 98
    log.release.set()
    assert log.flush()
    log.close()
    assert [e["n"] for e in _lines(path)] == [0, 1, 2]


def test_the_file_is_rotated_by_size_and_old_files_beyond_the_backups_are_removed(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = audit.configure(str(path), max_bytes=2000, backups=2)
    for i in range(60):  # ~190 bytes a line: about 10 lines a file, so several rotations
        audit.event("authentication_failure", principal=f"User:u{i}", host="10.0.0.9", door="kafka",
                    operation="SaslAuthenticate", detail="SASL_AUTHENTICATION_FAILED")
    assert log.flush()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["audit.log", "audit.log.1", "audit.log.2"]
    for name in files:
        assert os.path.getsize(tmp_path / name) <= 2000
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600
    # newest last in audit.log, the lines before it in .1 then .2, each line whole; the oldest are gone
    kept = [e["principal"] for name in ("audit.log.2", "audit.log.1", "audit.log") for e in _lines(tmp_path / name)]
    assert kept == [f"User:u{i}" for i in range(60 - len(kept), 60)] and len(kept) < 60


def test_no_backups_means_one_file_that_is_never_rotated(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = audit.configure(str(path), max_bytes=500, backups=0)
    for i in range(10):
        audit.event("admin_change", principal="User:admin", host="h", door="rest", operation=f"op{i}", allowed=True)
    assert log.flush()
    assert [p.name for p in tmp_path.iterdir()] == ["audit.log"] and len(_lines(path)) == 10
