"""A bounded-memory map from key hash to the last offset of that key (Kafka's SkimpyOffsetMap).

Memory is fixed up front by ``log.cleaner.dedupe.buffer.size``: each slot holds a 16-byte
MD5 of the key (two unsigned 64-bit halves) and an 8-byte offset, 24 bytes, in three
flat arrays (no Python object per key). The table is filled to at most ``load_factor``
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
    """Key hash → last offset, in ``buffer_bytes`` of memory."""

    __slots__ = ("slots", "max_entries", "size", "latest_offset", "_hi", "_lo", "_off", "probes")

    def __init__(self, buffer_bytes: int = DEFAULT_BUFFER_BYTES, load_factor: float = DEFAULT_LOAD_FACTOR) -> None:
        if buffer_bytes < 3 * SLOT_BYTES:
            raise ValueError(f"log.cleaner.dedupe.buffer.size={buffer_bytes} holds fewer than 3 slots")
        if not 0 < load_factor <= 0.95:
            raise ValueError("load factor must be in (0, 0.95]")
        self.slots = _prime_at_most(buffer_bytes // SLOT_BYTES)
        self.max_entries = max(int(self.slots * load_factor), 1)
        self._hi = array("Q", [0]) * self.slots
        self._lo = array("Q", [0]) * self.slots
        self._off = array("q", [_EMPTY]) * self.slots
        self.size = 0
        self.latest_offset = -1
        self.probes = 0

    @property
    def memory_bytes(self) -> int:
        """Bytes held by the three slot arrays."""
        return sum(a.itemsize * len(a) for a in (self._hi, self._lo, self._off))

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
        """``(slot, hi, lo)``: the slot holding the key's hash, or the empty slot where it would go."""
        h = int.from_bytes(md5(key).digest(), "little")
        hi = h & _MASK64
        lo = h >> 64
        n = self.slots
        i = hi % n
        offs = self._off
        if offs[i] == _EMPTY or (self._hi[i] == hi and self._lo[i] == lo):
            return i, hi, lo
        step = 1 + lo % (n - 1)
        his, los = self._hi, self._lo
        while True:
            self.probes += 1
            i += step
            if i >= n:
                i -= n
            if offs[i] == _EMPTY or (his[i] == hi and los[i] == lo):
                return i, hi, lo

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``offset`` as the latest for ``key``; False (nothing changed) when a new key
        would pass the load factor."""
        i, hi, lo = self._find(key)
        offs = self._off
        if offs[i] == _EMPTY:
            if self.size >= self.max_entries:
                return False
            self._hi[i] = hi
            self._lo[i] = lo
            self.size += 1
        offs[i] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset
        return True

    def get(self, key: bytes) -> int:
        """The latest offset recorded for ``key``, or -1."""
        return self._off[self._find(key)[0]]

    def clear(self) -> None:
        self._off = array("q", [_EMPTY]) * self.slots
        self.size = 0
        self.latest_offset = -1
