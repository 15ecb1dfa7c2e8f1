"""The aborted-transaction index of one segment (``<base offset>.txnindex``), in Kafka's layout.

Each entry is 34 bytes, big-endian: version int16 (0), producer id int64, first offset int64, last
offset int64 (the abort marker's), last stable offset int64 (when the abort was written). Entries are
appended in the order the markers are, so their last offsets rise. A read_committed fetch asks each
segment from the one holding the fetch offset on for the entries that overlap what it returns; the
client then skips those producers' records between first and last offset.

A torn last entry (a crash mid-write) is dropped on open; the recovery that follows rebuilds the index
of the segments it re-reads.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable

from services.broker.txn_state import AbortedTxn

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0
SUFFIX = ".txnindex"


def index_path(directory: str, base_offset: int) -> str:
    return os.path.join(directory, f"{base_offset:020d}{SUFFIX}")


def encode(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(ENTRY.pack(VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
                    for e in entries)


def decode(data: bytes) -> list[AbortedTxn]:
    """Whole entries only (a torn tail is ignored); an entry of another version is refused."""
    out = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, pid, first, last, lso = ENTRY.unpack_from(data, pos)
        if version != VERSION:
            raise ValueError(f"aborted-transaction index entry at byte {pos} has version {version}, not {VERSION}")
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class TxnIndex:
    """One segment's index: entries in memory (they are few: one per aborted transaction), appended to
    the file as markers arrive."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        if os.path.exists(path):
            with open(path, "rb") as f:
                data = f.read()
            self.entries = decode(data)
            whole = len(self.entries) * ENTRY_SIZE
            if whole != len(data):
                os.truncate(path, whole)

    def append(self, entry: AbortedTxn) -> None:
        if self.entries and entry.last_offset <= self.entries[-1].last_offset:
            raise ValueError(f"aborted transaction ending at {entry.last_offset} is not after "
                             f"{self.entries[-1].last_offset}")
        with open(self.path, "ab") as f:
            f.write(encode([entry]))
        self.entries.append(entry)

    def flush(self) -> None:
        if os.path.exists(self.path):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def replace_from(self, offset: int, entries: list[AbortedTxn]) -> None:
        """Entries whose marker is at or after ``offset`` become ``entries`` (recovery's rebuild)."""
        keep = [e for e in self.entries if e.last_offset < offset]
        new = keep + sorted(entries, key=lambda e: e.last_offset)
        if new != self.entries:
            self.entries = new
            tmp = self.path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(encode(new))
            os.replace(tmp, self.path)

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after ``offset`` (the log was cut there)."""
        keep = [e for e in self.entries if e.last_offset < offset]
        if len(keep) != len(self.entries):
            self.entries = keep
            with open(self.path, "wb") as f:
                f.write(encode(keep))

    def delete(self) -> None:
        self.entries = []
        if os.path.exists(self.path):
            os.unlink(self.path)


def collect_aborted(indexes: Iterable[TxnIndex], fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
    """The aborted transactions a read of [fetch_offset, upper_bound) overlaps, from the segments' indexes
    in offset order starting with the segment that holds ``fetch_offset`` (Kafka's
    ``collectAbortedTransactions``): entries whose marker is at or after the fetch offset and whose first
    offset is below the bound; the first entry whose LSO is at or past the bound ends the search (no later
    abort can overlap the read)."""
    out: list[AbortedTxn] = []
    for index in indexes:
        for e in index.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                out.append(e)
            if e.last_stable_offset >= upper_bound:
                return out
    return out
