"""``tidelog bench compact --cluster``: real cleaner processes over gRPC against a real broker."""

from __future__ import annotations

import json

from click.testing import CliRunner

from shared.cli.main import cli


def test_bench_compact_on_a_cluster_reports_end_to_end_rates() -> None:
    res = CliRunner().invoke(cli, ["bench", "compact", "--cluster", "--log-mb", "2", "--partitions", "2",
                                   "--distinct-keys", "100", "--workers", "1,2", "--timeout-s", "60", "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.output)
    assert set(r["mb_per_s"]) == {"1", "2"} and all(v > 0 for v in r["mb_per_s"].values())
    assert all(b > 0 for b in r["cleaned_bytes"].values())
    # CPU is read from /proc/<pid>/stat in clock ticks (10 ms): a round of 1 MB per log can spend less
    # than one tick in a process, so only the figures' presence and sign are checked here.
    assert all(set(r[k]) == {"1", "2"} and min(r[k].values()) >= 0 for k in ("broker_cpu_s", "workers_cpu_s"))
