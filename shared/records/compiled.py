"""The compiled fast paths (``_speedups.c``, built by ``setup.py``), or None where they could not be built.

``setup.py`` marks the extension optional, so an install without a C compiler still succeeds; every
caller keeps its Python code for that case (and for whatever the compiled code declines).
"""

from __future__ import annotations

from types import ModuleType

speedups: ModuleType | None
try:
    from shared.records import _speedups as speedups
except ImportError:  # pragma: no cover - only where the extension could not be built
    speedups = None
