"""Process-level tuning shared by services, clients and the CLI.

Decoding a batch allocates one bytes object per key and value (1 KiB each in
typical use). glibc returns freed memory to the OS eagerly and then faults it
back in, which made allocation-heavy loops ~3x slower here. Raising
``M_TRIM_THRESHOLD`` and ``M_MMAP_THRESHOLD`` keeps freed memory in the process,
as a JVM keeps its heap.

The clients hand every request and response between threads (the application's,
the sender, gRPC's request and completion threads, a reader). Each hand-off needs
the GIL, and a thread that holds it while busy (an application calling ``send()``
in a loop) gives it up only every *switch interval*, 5 ms by default, so one
produce request waited ~20 ms on four hand-offs. ``tune_switch_interval`` lowers
the interval to 0.5 ms unless the application chose its own.

A consumer makes one record object per record (a producer one future per send).
With Python's default first-generation threshold of 700 allocations the cyclic
garbage collector ran every ~700 records and traversed the records still alive
(the current poll's and the batch being decoded), ~10 % of the consumer's time.
``tune_gc`` raises the threshold to 10,000 unless the application set its own, as
a JVM client would size its young generation.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


@functools.cache
def tune_allocator(trim_threshold: int = 256 * 1024 * 1024, mmap_threshold: int = 32 * 1024 * 1024) -> bool:
    """Apply the allocator tuning once per process; return whether it took effect."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        ok = libc.mallopt(_M_TRIM_THRESHOLD, trim_threshold)
        # Batches of ~1 MiB would otherwise be mmapped and unmapped on every
        # allocation, faulting their pages in each time.
        return bool(ok and libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold))
    except (OSError, AttributeError):
        return False


_PYTHON_DEFAULT_SWITCH_INTERVAL = 0.005


def tune_switch_interval(interval_s: float = 0.0005) -> bool:
    """Lower the interpreter's switch interval for a client's I/O threads, unless the application
    already changed it from Python's default; return whether it is now ``interval_s``."""
    current = sys.getswitchinterval()
    if abs(current - _PYTHON_DEFAULT_SWITCH_INTERVAL) < 1e-9:
        sys.setswitchinterval(interval_s)
        return True
    return abs(current - interval_s) < 1e-9


_PYTHON_DEFAULT_GC_THRESHOLD0 = 700


def tune_gc(threshold0: int = 10_000) -> bool:
    """Raise the cyclic GC's first-generation threshold unless the application changed it from
    Python's default; return whether it is now ``threshold0``."""
    current = gc.get_threshold()
    if current[0] == _PYTHON_DEFAULT_GC_THRESHOLD0:
        gc.set_threshold(threshold0, *current[1:])
        return True
    return current[0] == threshold0
