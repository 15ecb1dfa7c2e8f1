"""The audit log: one JSON line per authentication failure, authorization denial and admin change.

Issue 23 asks for who, what, from where and when of every refusal and every admin change, with a metric
for each. A line::

    {"ts": "2026-12-03T12:26:23.123Z", "kind": "authorization_denied", "principal": "User:mallory",
     "host": "10.0.0.7", "door": "grpc", "operation": "WRITE", "resource": "TOPIC:orders",
     "detail": "TOPIC_AUTHORIZATION_FAILED", "allowed": false}

``event(...)`` is what the refusal points (and the admin routes) call. It is cheap and never blocks the
caller: it counts the event (``tidelog_audit_events_total{kind,door}``) and hands it to a bounded queue
that one daemon thread formats and drains into the file. A denial storm therefore costs the event loop a
counter increment, a small dict and one ``put_nowait`` per event; when the writer cannot keep up, the queue
fills and further events are dropped and counted (``tidelog_audit_events_dropped_total``), never waited for.

Where lines go is set once per process by ``configure(path)`` (the service start-up passes
``default_path(data_dir)``, ``<data_dir>/audit.log``, created 0600). Without ``configure`` (tools, tests),
events go to the ``tidelog.audit`` logger only. The file is rotated by size (the stdlib's
``RotatingFileHandler``: ``audit.log.1`` is the newest old file, ``audit.log.N`` the oldest kept), so a
flood of refused attempts cannot fill the disk: ``audit_log_max_bytes`` (100 MiB; 0 never rotates) and
``audit_log_backups`` (5) in every service's settings. Must not import ``services`` or ``pipelines``.
"""

from __future__ import annotations

import atexit
import json
import logging
import logging.handlers
import os
import queue
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final, Literal

from prometheus_client import Counter

log = logging.getLogger("tidelog.audit")

Kind = Literal["authentication_failure", "authorization_denied", "admin_change"]
Door = Literal["grpc", "kafka", "rest"]
KINDS: Final = ("authentication_failure", "authorization_denied", "admin_change")
DOORS: Final = ("grpc", "kafka", "rest")
FILE_NAME: Final = "audit.log"
#: Lines waiting for the writer; beyond this, events are dropped and counted.
QUEUE_MAX: Final = 10_000
#: Longest text kept per field (a client-supplied resource name or detail cannot make a line huge).
FIELD_MAX: Final = 1024
#: Rotation defaults: the file's size that starts a new one, and how many old files are kept.
MAX_BYTES: Final = 100 * 1024 * 1024
BACKUPS: Final = 5

EVENTS = Counter("tidelog_audit_events", "Audit events by kind (authentication_failure, authorization_denied, "
                 "admin_change) and door (grpc, kafka, rest)", ["kind", "door"])
DROPPED = Counter("tidelog_audit_events_dropped", "Audit events not written because the audit queue was full")
_counters = {(k, d): EVENTS.labels(k, d) for k in KINDS for d in DOORS}


def default_path(data_dir: str) -> str:
    """Where a service keeps its audit log: ``<data_dir>/audit.log``."""
    return os.path.join(data_dir, FILE_NAME)


def _clip(text: str) -> str:
    return text if len(text) <= FIELD_MAX else text[:FIELD_MAX] + "..."


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_line(record: dict[str, Any]) -> str:
    """One event's JSON line: ``ts`` (a ``time.time()`` float) as ISO 8601 UTC, long texts clipped.
    JSON escaping keeps a hostile name (newlines, quotes) inside its field."""
    out = {key: _clip(value) if isinstance(value, str) else value for key, value in record.items()}
    out["ts"] = _iso(record["ts"])
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"))


class _PrivateRotatingFile(logging.handlers.RotatingFileHandler):
    """``RotatingFileHandler`` whose files are created 0600 (they name principals and hosts)."""

    def _open(self) -> Any:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        return os.fdopen(fd, "a", encoding="utf-8")


class AuditLog:
    """A bounded queue of lines and the thread that writes them (to a size-rotated file, or to the logger)."""

    def __init__(self, path: str | None = None, *, maxsize: int = QUEUE_MAX, max_bytes: int = MAX_BYTES,
                 backups: int = BACKUPS, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize)
        self._file: _PrivateRotatingFile | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.dropped = 0
        self._dropped_reported = 0
        if path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            # No rotation without a backup to rotate to (the handler's own rule): 0 backups keeps one file.
            self._file = _PrivateRotatingFile(path, maxBytes=max_bytes if backups else 0, backupCount=backups)
            self._file.setFormatter(logging.Formatter("%(message)s"))

    def submit(self, record: dict[str, Any]) -> bool:
        """Queue one event (formatted into its line by the writer thread, off the caller's time);
        False (and counted) when the queue is full."""
        self._ensure_thread()
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1
            DROPPED.inc()
            return False
        return True

    def _ensure_thread(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="tidelog-audit", daemon=True)
                    self._thread.start()

    def _run(self) -> None:
        stop = False
        while not stop:
            batch = [self._queue.get()]
            while len(batch) < 1000:  # whatever else is waiting, before one flush
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                for record in batch:
                    if record is None:
                        stop = True
                    else:
                        self._write(format_line(record))
                self._flush()
            except Exception:  # noqa: BLE001 - the audit writer must outlive a full disk
                log.exception("audit log write failed")
            finally:
                for _ in batch:
                    self._queue.task_done()

    def _write(self, line: str) -> None:
        if self._file is not None:
            record = logging.LogRecord("tidelog.audit", logging.INFO, "", 0, line, None, None)
            if self._file.shouldRollover(record):
                self._file.doRollover()
            self._file.stream.write(line + "\n")  # emit() would flush per line: _flush does it per batch
        else:
            log.info(line)

    def _flush(self) -> None:
        if self._file is not None:
            self._file.flush()
        if self.dropped != self._dropped_reported:
            log.warning("audit queue full: events dropped", extra={"dropped": self.dropped - self._dropped_reported})
            self._dropped_reported = self.dropped

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued line is written (tests, shutdown); False on timeout."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued, stop the thread, close the file."""
        if self._thread is not None:
            try:
                self._queue.put(None, timeout=timeout)
            except queue.Full:
                pass
            self._thread.join(timeout)
            self._thread = None
        if self._file is not None:
            self._file.close()
            self._file = None


_current: list[AuditLog] = [AuditLog()]


@atexit.register
def _close_at_exit() -> None:
    """What is queued when the process exits normally still reaches the file (bounded wait)."""
    _current[0].close(timeout=2.0)


def configure(path: str | None, *, max_bytes: int = MAX_BYTES, backups: int = BACKUPS) -> AuditLog:
    """Send this process's audit events to ``path`` (None: to the ``tidelog.audit`` logger only), a new
    file begun when one reaches ``max_bytes`` and ``backups`` old ones kept. Called once at service start-up
    with ``default_path(settings.data_dir)`` and the service's settings."""
    old, _current[0] = _current[0], AuditLog(path, max_bytes=max_bytes, backups=backups)
    old.close()
    return _current[0]


def current() -> AuditLog:
    return _current[0]


def event(kind: Kind, *, principal: str, host: str, door: Door, operation: str, resource: str = "",
          detail: str = "", allowed: bool = False) -> None:
    """Record one audit event. Never blocks and never raises for a full queue (the event is counted
    and dropped); raises ``ValueError`` for an unknown ``kind`` or ``door`` (a programming error)."""
    counter = _counters.get((kind, door))
    if counter is None:
        raise ValueError(f"unknown audit kind/door {kind!r}/{door!r} (kinds: {', '.join(KINDS)}; "
                         f"doors: {', '.join(DOORS)})")
    counter.inc()
    audit = _current[0]
    audit.submit({"ts": audit.clock(), "kind": kind, "principal": principal, "host": host, "door": door,
                  "operation": operation, "resource": resource, "detail": detail, "allowed": allowed})
