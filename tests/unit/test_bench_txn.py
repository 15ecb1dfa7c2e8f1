"""``tidelog bench txn``'s pure helpers (shared/cli/bench_txn.py) and its command line."""

from __future__ import annotations

from click.testing import CliRunner

from shared.cli.bench_txn import combined, rates, ratio
from shared.cli.main import cli


def test_rates_are_records_and_megabytes_per_second() -> None:
    assert rates(1000, 1024, 2.0) == {"records_per_s": 500.0, "mb_per_s": 0.512}
    assert rates(10, 1024, 0.0) == {"records_per_s": 0.0, "mb_per_s": 0.0}


def test_ratio_of_nothing_is_zero() -> None:
    assert ratio(9.0, 10.0) == 0.9
    assert ratio(1.0, 0.0) == 0.0


def test_runs_combine_as_records_over_seconds_with_every_commit_in_the_percentiles() -> None:
    a = {"records": 1000, "seconds": 1.0, "transactions": 10, "_commit_latency_ms": [1.0] * 10,
         "_flush_commit_ms": [5.0] * 10}
    b = {"records": 1000, "seconds": 3.0, "transactions": 30, "_commit_latency_ms": [3.0] * 30,
         "_flush_commit_ms": [7.0] * 30}
    out = combined([a, b], 1000)
    assert (out["records"], out["seconds"], out["records_per_s"], out["mb_per_s"]) == (2000, 4.0, 500.0, 0.5)
    assert (out["transactions"], out["transactions_per_s"]) == (40, 10.0)
    assert out["commit_latency_ms"]["p50"] == 3.0 and out["flush_commit_ms"]["max"] == 7.0
    assert combined([{"records": 10, "seconds": 2.0}], 1) == {"records": 10, "seconds": 2.0, "records_per_s": 5.0,
                                                             "mb_per_s": 5e-06}


def test_bench_txn_is_registered_with_its_options() -> None:
    out = CliRunner().invoke(cli, ["bench", "txn", "--help"])
    assert out.exit_code == 0, out.output
    for option in ("--commit-interval-ms", "--records", "--record-size", "--rounds", "--skip-baseline", "--json"):
        assert option in out.output
