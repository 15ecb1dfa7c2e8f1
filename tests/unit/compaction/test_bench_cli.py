"""``tidelog bench compact`` runs and reports MB/s per worker count; bad flags are refused."""

from __future__ import annotations

import json

from click.testing import CliRunner

from shared.cli.main import cli


def test_bench_compact_reports_rates_and_bytes_per_key() -> None:
    res = CliRunner().invoke(cli, ["bench", "compact", "--log-mb", "1", "--partitions", "2", "--distinct-keys", "50",
                                   "--workers", "1,2", "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.output)
    assert set(r["mb_per_s"]) == {"1", "2"} and all(v > 0 for v in r["mb_per_s"].values())
    assert r["map_bytes_per_key"] <= 32 and 0 < r["kept_fraction"] < 1
    assert r["verify_mb_per_s"] > 0 and set(r["mb_per_s_per_worker"]) == {"1", "2"}


def test_bench_compact_refuses_bad_worker_counts() -> None:
    res = CliRunner().invoke(cli, ["bench", "compact", "--workers", "0"])
    assert res.exit_code != 0 and "worker counts" in res.output
