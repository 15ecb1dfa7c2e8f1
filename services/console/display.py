"""How the console shows record bytes and pages through a log: pure functions, no I/O.

Owns the format guess (JSON, text or hex), the truncation of large values, the
filter over key, value and headers, the JSON-lines export form of a record and
the page arithmetic of the message browser. Nothing here escapes HTML: the
templates do (Jinja2 autoescape); these functions only decide what text to show.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

FORMATS = ("auto", "text", "json", "hex")
#: Characters of a key, value or header shown in a list before "expand".
PREVIEW_CHARS = 200
#: Characters shown on a single record's page (a 1 MB value shows its first 256 KiB there).
FULL_CHARS = 256 * 1024
PAGE_SIZE = 100

_TEXT_CONTROLS = frozenset("\t\n\r")


def guess_format(data: bytes | None) -> str:
    """``null`` for a missing value, ``json`` for UTF-8 that parses as a JSON object or array (or a string,
    number, boolean), ``text`` for printable UTF-8, else ``hex``."""
    if data is None:
        return "null"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "hex"
    stripped = text.strip()
    if stripped[:1] in ("{", "[", '"') and _parses(stripped):
        return "json"
    if any((c < " " and c not in _TEXT_CONTROLS) or c == "\x7f" for c in text):
        return "hex"
    return "text"


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Shown:
    """A key, value or header value as the page shows it."""

    format: str  # null, text, json or hex: the one used
    guessed: str  # the guessed one
    text: str
    size: int  # bytes
    truncated: bool


def show(data: bytes | None, fmt: str = "auto", limit: int = PREVIEW_CHARS) -> Shown:
    """``data`` as text in ``fmt`` (``auto``: the guess), cut at ``limit`` characters.

    Invalid UTF-8 asked for as text shows its bad bytes as ``\\xNN``; a value that is not JSON asked for as
    JSON falls back to text (or hex when not UTF-8).
    """
    guessed = guess_format(data)
    if data is None:
        return Shown("null", "null", "", 0, False)
    use = guessed if fmt == "auto" else fmt
    if use == "json":
        try:
            text = json.dumps(json.loads(data), indent=None if limit <= PREVIEW_CHARS else 2, ensure_ascii=False)
        except (ValueError, UnicodeDecodeError):
            use = "text" if guessed != "hex" else "hex"
    if use == "hex":
        # Two hex digits and a space per byte: only convert the bytes that fit.
        cut = data[: limit // 3 + 1]
        text = cut.hex(" ")
    elif use == "text":
        text = data[: limit * 4 + 4].decode("utf-8", errors="backslashreplace")
    truncated = len(text) > limit or (use == "hex" and len(data) > limit // 3 + 1)
    return Shown(use, guessed, text[:limit], len(data), truncated)


def matches(needle: str, key: bytes | None, value: bytes | None,
            headers: Sequence[tuple[str, bytes | None]]) -> bool:
    """Case-insensitive substring search over the key, the value and every header's name and value
    (bytes read as UTF-8, bad bytes replaced). An empty needle matches everything."""
    if not needle:
        return True
    low = needle.lower()
    for part in (key, value):
        if part is not None and low in part.decode("utf-8", errors="replace").lower():
            return True
    for name, hv in headers:
        if low in name.lower() or (hv is not None and low in hv.decode("utf-8", errors="replace").lower()):
            return True
    return False


def _wire(data: bytes | None) -> tuple[str | None, str]:
    if data is None:
        return None, "null"
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def record_json(topic: str, partition: int, offset: int, timestamp: int, key: bytes | None, value: bytes | None,
                headers: Sequence[tuple[str, bytes | None]]) -> dict[str, Any]:
    """A record as one JSON object (the download's lines, the JSON API): UTF-8 text as is, other bytes in
    base64, with the encoding named beside each field."""
    k, k_enc = _wire(key)
    v, v_enc = _wire(value)
    hs = []
    for name, hv in headers:
        h, h_enc = _wire(hv)
        hs.append({"key": name, "value": h, "encoding": h_enc})
    return {"topic": topic, "partition": partition, "offset": offset, "timestamp": timestamp,
            "key": k, "key_encoding": k_enc, "value": v, "value_encoding": v_enc, "headers": hs}


# -- paging ------------------------------------------------------------------------------------------------

def first_offset(mode: str, log_start: int, log_end: int, offset: int | None = None,
                 size: int = PAGE_SIZE) -> int:
    """Where a page of one partition starts for ``mode`` start / end / offset (timestamps are looked up
    by the broker first, then read as an offset), clamped to ``[log_start, log_end]``."""
    if mode == "start":
        at = log_start
    elif mode == "end":
        at = log_end - size
    elif mode == "offset":
        if offset is None:
            raise ValueError("mode 'offset' needs an offset")
        at = offset
    else:
        raise ValueError(f"unknown mode {mode!r}")
    return max(log_start, min(log_end, at))


def previous_page(first: int, log_start: int, size: int = PAGE_SIZE) -> int | None:
    """The offset a page before the one starting at ``first`` starts at; None on the first page."""
    if first <= log_start:
        return None
    return max(log_start, first - size)


def split_budget(total: int, parts: int) -> int:
    """Records to read from each of ``parts`` partitions so that ``total`` can be filled from any one of them
    once the others are exhausted (all of ``total``) but a very wide topic stays bounded."""
    if parts <= 0:
        return 0
    return total if parts <= 8 else max(10, -(-total * 4 // parts))


def encode_cursor(positions: dict[int, int]) -> str:
    """``{partition: offset}`` as ``"0:15,1:7"`` (the messages page's ``cursor`` parameter)."""
    return ",".join(f"{p}:{o}" for p, o in sorted(positions.items()))


def decode_cursor(text: str) -> dict[int, int]:
    """The inverse of ``encode_cursor``; ValueError on anything else."""
    out: dict[int, int] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        p, sep, o = item.partition(":")
        if not sep or not p.isdigit() or not o.lstrip("-").isdigit():
            raise ValueError(f"bad cursor item {item!r}: expected partition:offset")
        out[int(p)] = int(o)
    return out


@dataclass(frozen=True)
class TailSample:
    """What one live-tail tick sends: at most ``limit`` of the records seen since the last tick."""

    shown: list[Any]
    seen: int

    @property
    def skipped(self) -> int:
        return self.seen - len(self.shown)


def sample(records: list[Any], limit: int) -> TailSample:
    """The newest ``limit`` records of a tick (a page cannot draw thousands a second; it says how many it
    skipped)."""
    return TailSample(records[-limit:] if limit > 0 else [], len(records))


def parse_headers(text: str) -> list[tuple[str, bytes]]:
    """Headers typed one per line as ``name: value`` (or ``name=value``); blank lines ignored."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        cut = [i for i in (line.find(":"), line.find("=")) if i > 0]
        if not cut:
            raise ValueError(f"header line {line[:40]!r}: write name: value")
        i = min(cut)
        out.append((line[:i].strip(), line[i + 1:].strip().encode()))
    return out


def parse_int(text: str | None, what: str, minimum: int | None = None) -> int | None:
    """An optional integer form or query field; ValueError naming the field."""
    if text is None or not text.strip():
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"{what}: {text.strip()[:40]!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{what}: must be at least {minimum}")
    return value
