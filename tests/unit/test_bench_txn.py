"""``tidelog bench txn``'s pure helpers (shared/cli/bench_txn.py) and its command line."""

from __future__ import annotations

from click.testing import CliRunner

from shared.cli.bench_txn import rates, ratio
from shared.cli.main import cli


def test_rates_are_records_and_megabytes_per_second() -> None:
    assert rates(1000, 1024, 2.0) == {"records_per_s": 500.0, "mb_per_s": 0.512}
    assert rates(10, 1024, 0.0) == {"records_per_s": 0.0, "mb_per_s": 0.0}


def test_ratio_of_nothing_is_zero() -> None:
    assert ratio(9.0, 10.0) == 0.9
    assert ratio(1.0, 0.0) == 0.0


def test_bench_txn_is_registered_with_its_options() -> None:
    out = CliRunner().invoke(cli, ["bench", "txn", "--help"])
    assert out.exit_code == 0, out.output
    for option in ("--commit-interval-ms", "--records", "--record-size", "--skip-baseline", "--json"):
        assert option in out.output
