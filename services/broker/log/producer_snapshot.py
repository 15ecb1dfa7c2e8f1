"""Producer-state snapshots (Kafka's ``<offset>.snapshot`` files) in a partition directory.

A snapshot taken when the log rolls to offset N holds the idempotent-producer state of
every batch below N. Rebuilding the state loads the newest snapshot at or below the log
end and replays only the batch headers after it, so the state never depends on batches
that compaction later removed from the older segments.

File format (JSON, written to ``.tmp``, fsynced, renamed)::

    {"version": 2, "offset": N, "crc": crc32c of the canonical producers text + transactions text,
     "producers": [[producer_id, epoch, [[first_seq, last_seq, first_offset, last_offset], ...]], ...],
     "transactions": [[producer_id, epoch, coordinator_epoch, open transaction's first offset or -1], ...]}

Version 1 (no ``transactions``) is still read.

A snapshot that does not parse or whose CRC does not match is ignored (an older one, or
the log itself, is used instead). Files and pure state only; no networking, no asyncio.
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Any

from services.broker.producer_state import BatchMeta, ProducerEntry, ProducerStateManager
from services.broker.txn_state import AbortedTxn, TxnState
from shared.records.decoder import control_record_type, decode_batch
from shared.records.header import crc32c

if TYPE_CHECKING:
    from services.broker.log.partition_log import PartitionLog

SUFFIX = ".snapshot"
VERSION = 2

log = logging.getLogger(__name__)


def snapshot_path(directory: str, offset: int) -> str:
    return os.path.join(directory, f"{offset:020d}{SUFFIX}")


def snapshot_offsets(directory: str) -> list[int]:
    out = []
    for name in os.listdir(directory):
        if name.endswith(SUFFIX) and name[: -len(SUFFIX)].isdigit():
            out.append(int(name[: -len(SUFFIX)]))
    return sorted(out)


def _producers_text(state: ProducerStateManager) -> str:
    rows: list[Any] = [
        [pid, e.epoch, [[b.first_seq, b.last_seq, b.first_offset, b.last_offset] for b in e.batches]]
        for pid, e in sorted(state.producers.items())
    ]
    return json.dumps(rows, separators=(",", ":"))


def _txns_text(rows: Any) -> str:
    return json.dumps(rows, separators=(",", ":"))


def write_snapshot(directory: str, offset: int, state: ProducerStateManager) -> str:
    text = _producers_text(state)
    txns = _txns_text(state.txn.rows())
    crc = crc32c((text + txns).encode())
    doc = f'{{"version":{VERSION},"offset":{offset},"crc":{crc},"producers":{text},"transactions":{txns}}}'
    path = snapshot_path(directory, offset)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(doc)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_snapshot(directory: str, offset: int) -> ProducerStateManager | None:
    """The state in ``<offset>.snapshot``, or None when it is missing or damaged."""
    try:
        with open(snapshot_path(directory, offset)) as f:
            doc = json.load(f)
        rows = doc["producers"]
        text = json.dumps(rows, separators=(",", ":"))
        version = doc["version"]
        txns = doc.get("transactions", []) if version == 2 else []
        covered = text + (_txns_text(txns) if version == 2 else "")
        if version not in (1, 2) or doc["offset"] != offset or doc["crc"] != crc32c(covered.encode()):
            raise ValueError("version, offset or CRC mismatch")
        state = ProducerStateManager()
        state.txn = TxnState.from_rows(txns)
        for pid, epoch, batches in rows:
            entry = ProducerEntry(int(epoch))
            for first_seq, last_seq, first_off, last_off in batches:
                entry.batches.append(BatchMeta(int(first_seq), int(last_seq), int(first_off), int(last_off)))
            state.producers[int(pid)] = entry
        return state
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring producer snapshot %s: %s", snapshot_path(directory, offset), exc)
        return None


def delete_snapshots(directory: str, *, below: int | None = None, above: int | None = None) -> None:
    """Remove snapshots with offset < ``below`` or > ``above``."""
    for off in snapshot_offsets(directory):
        if (below is not None and off < below) or (above is not None and off > above):
            try:
                os.unlink(snapshot_path(directory, off))
            except FileNotFoundError:
                pass


def take_snapshot(plog: PartitionLog, offset: int, state: ProducerStateManager) -> None:
    """Snapshot at a roll to ``offset``; older snapshots below the log start are pruned."""
    try:
        write_snapshot(plog.directory, offset, state)
        delete_snapshots(plog.directory, below=plog.log_start_offset)
    except OSError as exc:  # a missing snapshot only costs a longer replay
        log.warning("cannot snapshot producer state of %s at %d: %s", plog.directory, offset, exc)


def restore_producer_state(plog: PartitionLog) -> ProducerStateManager:
    """Newest valid snapshot at or below the log end, plus the batch headers after it."""
    leo = plog.log_end_offset
    delete_snapshots(plog.directory, above=leo)  # taken before a truncation: no longer true
    start = -1
    state = ProducerStateManager()
    for off in reversed(snapshot_offsets(plog.directory)):
        loaded = read_snapshot(plog.directory, off)
        if loaded is not None:
            state, start = loaded, off
            break
    for seg in plog.segments:
        if seg.next_offset <= start:
            continue  # wholly before the snapshot: not even read
        aborted: list[AbortedTxn] = []
        for bp in seg.scan_headers(0):
            h = bp.header
            if h.base_offset >= start and h.last_offset >= plog.log_start_offset:
                marker = read_marker(seg.read_at(bp.position, h.size)) if h.is_control else None
                entry = state.update(h, h.base_offset, h.last_offset, marker)
                if entry is not None:
                    aborted.append(entry)
        # The replayed part of this segment's aborted-transaction index is rebuilt from the markers (its
        # file may have missed entries written after the last flush).
        seg.txn_index.replace_from(max(start, seg.base_offset), aborted)
    return state


def read_marker(batch: bytes) -> tuple[int, int] | None:
    """``(control type, coordinator epoch)`` of a control batch's marker; None if it has no record."""
    _, records = decode_batch(batch, validate=False)
    if not records:
        return None
    value = records[0].value or b""
    coordinator_epoch = int.from_bytes(value[2:6], "big", signed=True) if len(value) >= 6 else 0
    return control_record_type(records[0]), coordinator_epoch
