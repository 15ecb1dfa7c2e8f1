"""The rich console the CLI prints its tables on.

On a terminal rich fits a table to the terminal's width. Piped or redirected (a script, ``watch``,
``| grep``), rich would assume 80 columns and cut cells with an ellipsis: member ids, partition
lists and column headings came out as ``orders-3,orde…``. There the console is wide enough for any
table, so every cell is printed whole; ``COLUMNS`` still wins when it is set.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any

from rich.console import Console

#: the width of a console that writes to a pipe or a file: tables are never that wide
PIPE_WIDTH = 100_000


def out_console(file: IO[str] | None = None, **kw: Any) -> Console:
    """A Console on ``file`` (stdout by default) that cuts nothing when it is not a terminal."""
    stream = file if file is not None else sys.stdout
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()) and not os.environ.get("COLUMNS") and "width" not in kw:
        kw["width"] = PIPE_WIDTH
    return Console(file=file, **kw)
