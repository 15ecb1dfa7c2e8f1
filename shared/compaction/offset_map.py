"""A bounded-memory map from key hash to the last offset of that key (Kafka's SkimpyOffsetMap).

Memory is fixed up front by ``log.cleaner.dedupe.buffer.size``: each slot holds the key's
128-bit hash (``scan.hash_spans``; Kafka uses MD5, as wide) as two unsigned 64-bit halves and
an 8-byte offset, 24 bytes, side by side in one numpy table (no Python object per key). The table is filled to at most ``load_factor``
(0.9, Kafka's ``log.cleaner.io.buffer.load.factor``), so a full map costs 24 / 0.9 =
26.7 bytes per distinct key. Collisions are resolved by double hashing over a prime
number of slots. Two keys with the same 128-bit hash are treated as one key, as Kafka does.
Keys go in and are looked up many at a time (``put_many`` / ``get_many``): every probe round
is a few numpy steps over all the keys still looking for their slot.

Pure: no files, no I/O.
"""

from __future__ import annotations

import numpy as np

from shared.compaction.scan import hash_key

SLOT_BYTES = 24
DEFAULT_BUFFER_BYTES = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size
DEFAULT_LOAD_FACTOR = 0.9


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def _prime_at_most(n: int) -> int:
    while n > 2 and not _is_prime(n):
        n -= 1
    return max(n, 2)


def buffer_bytes_for(keys: int, cap: int, load_factor: float = DEFAULT_LOAD_FACTOR) -> int:
    """The smallest buffer (at most ``cap``) whose map holds ``keys`` distinct keys: a job with few
    records does not allocate the whole ``log.cleaner.dedupe.buffer.size``."""
    need = SLOT_BYTES * (int(keys / load_factor * 1.02) + 64)
    return max(min(need, cap), 3 * SLOT_BYTES)


class OffsetMap:
    """Key hash → last offset, in ``buffer_bytes`` of memory.

    Slot ``i`` is row ``i`` of the table: hash low half, hash high half, and offset + 1
    (0: empty), side by side so that a probe touches one cache line.
    """

    __slots__ = ("slots", "max_entries", "size", "latest_offset", "_table", "probes")

    def __init__(self, buffer_bytes: int = DEFAULT_BUFFER_BYTES, load_factor: float = DEFAULT_LOAD_FACTOR) -> None:
        if buffer_bytes < 3 * SLOT_BYTES:
            raise ValueError(f"log.cleaner.dedupe.buffer.size={buffer_bytes} holds fewer than 3 slots")
        if not 0 < load_factor <= 0.95:
            raise ValueError("load factor must be in (0, 0.95]")
        self.slots = _prime_at_most(buffer_bytes // SLOT_BYTES)
        self.max_entries = max(int(self.slots * load_factor), 1)
        self._table = np.zeros((self.slots, 3), np.uint64)
        self.size = 0
        self.latest_offset = -1
        self.probes = 0

    @property
    def memory_bytes(self) -> int:
        """Bytes held by the slot table."""
        return int(self._table.nbytes)

    @property
    def bytes_per_key_when_full(self) -> float:
        return self.memory_bytes / self.max_entries

    @property
    def full(self) -> bool:
        return self.size >= self.max_entries

    def room_for(self, n: int) -> bool:
        """True when ``n`` more distinct keys fit under the load factor."""
        return self.size + n <= self.max_entries

    def _start(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = np.uint64(self.slots)
        step = (np.uint64(1) + hi % np.uint64(max(self.slots - 1, 1))).astype(np.int64)
        return (lo % n).astype(np.int64), step

    def _slots_of(self, lo: np.ndarray, hi: np.ndarray, *, claim: np.ndarray | None = None) -> np.ndarray:
        """The slot of each (distinct) hash: where it is, or the empty slot where it would go. With
        ``claim`` (offsets + 1), empty slots are taken and written (one key per slot per round)."""
        t = self._table
        idx, step = self._start(lo, hi)
        pending = np.arange(len(lo))
        n = self.slots
        while pending.size:
            at = idx[pending]
            rows = t[at]
            empty = rows[:, 2] == 0
            match = ~empty & (rows[:, 0] == lo[pending]) & (rows[:, 1] == hi[pending])
            retry = np.zeros(0, np.int64)
            if claim is not None and empty.any():
                e = pending[empty]
                _, first = np.unique(idx[e], return_index=True)
                won = e[first]
                t[idx[won]] = np.stack((lo[won], hi[won], claim[won]), axis=1)
                self.size += len(won)
                lost = np.ones(len(e), bool)
                lost[first] = False
                retry = e[lost]  # their slot was just taken by another key: probe on from it
                done = match
            else:
                done = match | empty
            moving = pending[~done & ~empty] if claim is not None else pending[~done]
            if moving.size:
                self.probes += moving.size
                nxt = idx[moving] + step[moving]
                idx[moving] = np.where(nxt >= n, nxt - n, nxt)
            pending = np.concatenate((moving, retry))
        return idx

    def put_many(self, lo: np.ndarray, hi: np.ndarray, offsets: np.ndarray) -> None:
        """Record each key's offset (the highest one given for a key wins). The caller makes sure the
        new keys fit (``room_for``)."""
        if not len(lo):
            return
        order = np.lexsort((offsets, lo, hi))
        lo, hi, offsets = lo[order], hi[order], offsets[order]
        last = np.ones(len(lo), bool)
        last[:-1] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])
        lo, hi, offsets = lo[last], hi[last], offsets[last]
        value = (offsets + 1).astype(np.uint64)
        idx = self._slots_of(lo, hi, claim=value)
        self._table[idx, 2] = value
        self.latest_offset = max(self.latest_offset, int(offsets.max()))

    def get_many(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """The latest offset recorded for each key hash, or -1."""
        if not len(lo):
            return np.zeros(0, np.int64)
        return self._table[self._slots_of(lo, hi), 2].astype(np.int64) - 1

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``offset`` as the latest for ``key``; False (nothing changed) when a new key
        would pass the load factor."""
        lo, hi = (np.array([x], np.uint64) for x in hash_key(key))
        if self._table[self._slots_of(lo, hi)[0], 2] == 0 and self.size >= self.max_entries:
            return False
        self.put_many(lo, hi, np.array([offset], np.int64))
        return True

    def get(self, key: bytes) -> int:
        """The latest offset recorded for ``key``, or -1."""
        lo, hi = (np.array([x], np.uint64) for x in hash_key(key))
        return int(self.get_many(lo, hi)[0])

    def clear(self) -> None:
        self._table[:] = 0
        self.size = 0
        self.latest_offset = -1
