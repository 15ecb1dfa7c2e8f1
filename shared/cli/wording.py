"""Small wording helpers for CLI messages."""

from __future__ import annotations


def plural(n: int, word: str, plural_form: str | None = None) -> str:
    """``1 partition``, ``2 partitions``, ``0 records``."""
    return f"{n} {word if n == 1 else (plural_form or word + 's')}"
