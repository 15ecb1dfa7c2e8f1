"""Kafka's wire protocol: request and response codecs (``messages``), frame checks, the ApiVersions table.

kio (the message schemas) registers Hypothesis strategies for its types when ``hypothesis`` is importable:
a test dependency, which made every broker start 0.3 s slower. Outside a test run it is hidden while kio's
types load (and importable again right after); under pytest nothing changes.
"""

import sys as _sys

if "hypothesis" not in _sys.modules and "pytest" not in _sys.modules:
    _sys.modules["hypothesis"] = None  # type: ignore[assignment]
    try:
        import kio.static._phantom  # noqa: F401
    finally:
        del _sys.modules["hypothesis"]
