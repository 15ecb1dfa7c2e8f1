"""The ``tidelog`` source's option error (its own module: ``options`` and ``security`` both raise it)."""

from __future__ import annotations


class OptionError(ValueError):
    """A missing, conflicting or malformed option (raised on the driver, before any job runs)."""
