"""A bounded-memory map from key hash to the last offset of that key (Kafka's SkimpyOffsetMap).

Memory is fixed up front by ``log.cleaner.dedupe.buffer.size``: each slot holds a 16-byte
MD5 of the key (two unsigned 64-bit halves) and an 8-byte offset, 24 bytes, side by side
in one flat array (no Python object per key). The table is filled to at most ``load_factor``
(0.9, Kafka's ``log.cleaner.io.buffer.load.factor``), so a full map costs 24 / 0.9 =
26.7 bytes per distinct key. Collisions are resolved by double hashing over a prime
number of slots. Two keys with the same 128-bit hash are treated as one key, as Kafka does.

Pure: no files, no I/O.
"""

from __future__ import annotations

from array import array
from hashlib import md5

SLOT_BYTES = 24
DEFAULT_BUFFER_BYTES = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size
DEFAULT_LOAD_FACTOR = 0.9
_EMPTY = -1
_MASK64 = (1 << 64) - 1


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

    Slot ``i`` is the three words ``_slots[3i : 3i + 3]``: hash low half, hash high half, and
    offset + 1 (0: empty), side by side so that a probe touches one cache line, not three.
    """

    __slots__ = ("slots", "max_entries", "size", "latest_offset", "_table", "probes")

    def __init__(self, buffer_bytes: int = DEFAULT_BUFFER_BYTES, load_factor: float = DEFAULT_LOAD_FACTOR) -> None:
        if buffer_bytes < 3 * SLOT_BYTES:
            raise ValueError(f"log.cleaner.dedupe.buffer.size={buffer_bytes} holds fewer than 3 slots")
        if not 0 < load_factor <= 0.95:
            raise ValueError("load factor must be in (0, 0.95]")
        self.slots = _prime_at_most(buffer_bytes // SLOT_BYTES)
        self.max_entries = max(int(self.slots * load_factor), 1)
        self._table = array("Q", bytes(SLOT_BYTES * self.slots))
        self.size = 0
        self.latest_offset = -1
        self.probes = 0

    @property
    def memory_bytes(self) -> int:
        """Bytes held by the slot table."""
        return self._table.itemsize * len(self._table)

    @property
    def bytes_per_key_when_full(self) -> float:
        return self.memory_bytes / self.max_entries

    @property
    def full(self) -> bool:
        return self.size >= self.max_entries

    def room_for(self, n: int) -> bool:
        """True when ``n`` more distinct keys fit under the load factor."""
        return self.size + n <= self.max_entries

    def _find(self, key: bytes) -> tuple[int, int, int]:
        """``(word index, lo, hi)`` of the slot holding the key's hash, or of the empty slot where it would go."""
        h = int.from_bytes(md5(key).digest(), "little")
        lo = h & _MASK64
        hi = h >> 64
        n = self.slots
        i = lo % n
        t = self._table
        j = 3 * i
        if not t[j + 2] or (t[j] == lo and t[j + 1] == hi):
            return j, lo, hi
        step = 1 + hi % (n - 1)
        while True:
            self.probes += 1
            i += step
            if i >= n:
                i -= n
            j = 3 * i
            if not t[j + 2] or (t[j] == lo and t[j + 1] == hi):
                return j, lo, hi

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``offset`` as the latest for ``key``; False (nothing changed) when a new key
        would pass the load factor."""
        j, lo, hi = self._find(key)
        t = self._table
        if not t[j + 2]:
            if self.size >= self.max_entries:
                return False
            t[j] = lo
            t[j + 1] = hi
            self.size += 1
        t[j + 2] = offset + 1
        if offset > self.latest_offset:
            self.latest_offset = offset
        return True

    def get(self, key: bytes) -> int:
        """The latest offset recorded for ``key``, or -1."""
        return self._table[self._find(key)[0] + 2] - 1

    def clear(self) -> None:
        self._table = array("Q", bytes(SLOT_BYTES * self.slots))
        self.size = 0
        self.latest_offset = -1
