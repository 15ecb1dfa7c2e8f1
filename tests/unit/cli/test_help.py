"""Every command takes -h (and --help), including the bench commands that live outside shared/
(registered through the ``tidelog.bench`` entry-point group) and the pipeline jobs."""

from __future__ import annotations

from importlib.metadata import entry_points

import click
import pytest
from click.testing import CliRunner

from shared.cli.main import cli


def _paths(group: click.Group, ctx: click.Context, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        out.append((*prefix, name))
        if isinstance(cmd, click.Group):
            out += _paths(cmd, ctx, (*prefix, name))
    return out


def test_bench_commands_are_registered_by_entry_point() -> None:
    names = {ep.name for ep in entry_points(group="tidelog.bench")}
    assert {"log", "spark"} <= names, "entry points missing: run `pip install -e .` (scripts/setup.sh does)"


def test_every_command_takes_dash_h() -> None:
    with click.Context(cli) as ctx:
        paths = _paths(cli, ctx)
    assert ("bench", "spark") in paths and ("bench", "log") in paths and ("topics", "create") in paths
    runner = CliRunner()
    for path in paths:
        r = runner.invoke(cli, [*path, "-h"])
        assert r.exit_code == 0 and "Usage:" in r.output, (path, r.output)


@pytest.mark.parametrize("job", ["clicks_per_minute", "generate_clicks", "export_parquet"])
def test_pipeline_jobs_take_dash_h(job: str) -> None:
    module = __import__(f"pipelines.jobs.{job}", fromlist=["main"])
    r = CliRunner().invoke(module.main, ["-h"])
    assert r.exit_code == 0 and "Usage:" in r.output
