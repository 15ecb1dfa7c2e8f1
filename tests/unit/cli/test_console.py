"""CLI tables piped or redirected print every cell whole (rich assumed 80 columns and cut them)."""

from __future__ import annotations

import io

import pytest
from rich.table import Table

from shared.cli.console import out_console

LONG = ",".join(f"orders-{i}" for i in range(40))  # a member's partition list, ~350 characters


def _table() -> Table:
    table = Table(show_edge=False, box=None)
    for col in ("MEMBER-ID", "PARTITIONS"):
        table.add_column(col)
    table.add_row("a08c56dc43374cff9d90f0123456789a", LONG)
    return table


def test_piped_output_keeps_every_cell_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    buf = io.StringIO()
    out_console(file=buf).print(_table())
    text = buf.getvalue()
    assert LONG in text and "a08c56dc43374cff9d90f0123456789a" in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) < 500  # the table's own width, not the console's


def test_columns_still_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    buf = io.StringIO()
    out_console(file=buf).print(_table())
    assert max(len(line) for line in buf.getvalue().splitlines()) <= 80


def test_bench_progress_bar_only_on_a_terminal() -> None:
    """`tidelog bench produce|consume` drew tqdm bars into logs and pipes; now only on a terminal by default."""
    from click.testing import CliRunner

    from shared.cli.bench import _progress

    with CliRunner().isolation():  # stderr is not a terminal here
        assert _progress(None) is False
        assert _progress(True) is True and _progress(False) is False
