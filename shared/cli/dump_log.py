"""``tidelog dump-log``: print the batches and records of segment files, like Kafka's DumpLogSegments.

In ``--json`` mode each batch is one JSON object per line. Keys, values and
header values are shown as UTF-8 text when they decode as UTF-8, with
``"keyEncoding": "utf8"``; otherwise as base64 with ``"keyEncoding": "base64"``
(likewise ``valueEncoding`` and each header's ``valueEncoding``). A null key or
value is ``null`` with encoding ``null``. The exit status is non-zero when the path holds no segment,
or a file is not a valid segment, or a batch cannot be decoded (each is shown where it occurs).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from typing import Any

import click

from shared.errors import CorruptRecordError
from shared.records.decoder import decode_records, records_section
from shared.records.header import CRC_START, HEADER_SIZE, LOG_OVERHEAD, BatchHeader, crc32c


def _show(data: bytes | None) -> tuple[str | None, str | None]:
    if data is None:
        return None, None
    try:
        return data.decode("utf-8"), "utf8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def _segment_files(path: str) -> list[str]:
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if n.endswith(".log"))
        return [os.path.join(path, n) for n in names]
    return [path]


def describe_file(path: str) -> Iterator[dict[str, Any]]:
    """One dict per batch of the file; a final ``{"error": ...}`` if the tail is not a valid batch."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    n = len(data)
    while pos < n:
        if n - pos < HEADER_SIZE:
            yield {"position": pos, "error": f"{n - pos} trailing bytes are not a whole batch header"}
            return
        header = BatchHeader.parse(data, pos)
        size = header.batch_length + LOG_OVERHEAD
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + size > n:
            yield {"position": pos, "error": f"batch at position {pos} claims {size} bytes, {n - pos} remain"}
            return
        crc_ok = crc32c(memoryview(data)[pos + CRC_START : pos + size]) == header.crc
        entry: dict[str, Any] = {
            "baseOffset": header.base_offset,
            "lastOffset": header.last_offset,
            "count": header.records_count,
            "position": pos,
            "size": size,
            "magic": header.magic,
            "crc": header.crc,
            "crcValid": crc_ok,
            "compression": header.compression.name.lower() if header.attributes & 7 < 5 else "unknown",
            "timestampType": "LogAppendTime" if header.timestamp_type else "CreateTime",
            "baseTimestamp": header.base_timestamp,
            "maxTimestamp": header.max_timestamp,
            "producerId": header.producer_id,
            "producerEpoch": header.producer_epoch,
            "baseSequence": header.base_sequence,
            "lastSequence": header.last_sequence,
            "partitionLeaderEpoch": header.partition_leader_epoch,
            "isTransactional": header.is_transactional,
            "isControl": header.is_control,
        }
        if crc_ok and header.magic == 2:
            try:
                records = decode_records(header, records_section(data, header, pos))
                entry["records"] = [_record_json(r) for r in records]
            except CorruptRecordError as exc:
                entry["recordsError"] = str(exc)
        yield entry
        if not crc_ok or header.magic != 2:
            yield {"position": pos, "error": f"invalid batch at position {pos}: stopping"}
            return
        pos += size


def _record_json(r: Any) -> dict[str, Any]:
    key, key_enc = _show(r.key)
    value, value_enc = _show(r.value)
    headers = []
    for hk, hv in r.headers:
        v, enc = _show(hv)
        headers.append({"key": hk, "value": v, "valueEncoding": enc})
    return {
        "offset": r.offset,
        "timestamp": r.timestamp,
        "key": key,
        "keyEncoding": key_enc,
        "value": value,
        "valueEncoding": value_enc,
        "headers": headers,
    }


def _text(entry: dict[str, Any]) -> str:
    if "error" in entry:
        return f"error: {entry['error']}"
    b = entry
    lines = [
        f"baseOffset: {b['baseOffset']} lastOffset: {b['lastOffset']} count: {b['count']} "
        f"baseSequence: {b['baseSequence']} lastSequence: {b['lastSequence']} "
        f"producerId: {b['producerId']} producerEpoch: {b['producerEpoch']} "
        f"partitionLeaderEpoch: {b['partitionLeaderEpoch']} isTransactional: {str(b['isTransactional']).lower()} "
        f"isControl: {str(b['isControl']).lower()} position: {b['position']} "
        f"{b['timestampType']}: {b['maxTimestamp']} size: {b['size']} magic: {b['magic']} "
        f"compresscodec: {b['compression']} crc: {b['crc']} isvalid: {str(b['crcValid']).lower()}"
    ]
    for r in b.get("records", []):
        hs = ",".join(f"{h['key']}:{h['value']}" for h in r["headers"])
        lines.append(
            f"| offset: {r['offset']} {b['timestampType']}: {r['timestamp']} "
            f"key: {r['key']} payload: {r['value']} headers: [{hs}]"
        )
    if "recordsError" in b:
        lines.append(f"| records error: {b['recordsError']}")
    return "\n".join(lines)


@click.command("dump-log")
@click.argument("path", type=click.Path(exists=True, dir_okay=True, readable=True))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per batch (see module doc for bytes).")
def dump_log(path: str, as_json: bool) -> None:
    """Print every batch (and its records) of a segment file or a partition directory.

    Bytes are printed as UTF-8 text when valid, otherwise base64; in --json
    mode keyEncoding/valueEncoding say which ("utf8", "base64" or null).
    """
    files = _segment_files(path)
    if not files:
        raise click.ClickException(f"{path}: no segment files (*.log) in this directory")
    unreadable = 0
    for file in files:
        if not as_json:
            click.echo(f"Dumping {file}")
        for entry in describe_file(file):
            if "error" in entry or "recordsError" in entry:
                unreadable += 1
            if as_json:
                entry = {"file": file, **entry}
                click.echo(json.dumps(entry, separators=(",", ":")))
            else:
                click.echo(_text(entry))
    if unreadable:  # not a valid segment, or batches no reader can decode: say so in the exit status
        raise click.ClickException(f"not a valid segment: {path} has {unreadable} unreadable batch(es) or invalid data")
