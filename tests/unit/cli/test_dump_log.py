"""`tidelog dump-log` (invoked through the `tidelog` group, as users do: click caches a command's help
option the first time it runs, so a standalone invocation would lose the group's -h): prints a segment's batches; a file that is not a valid segment (or a directory
without one) exits non-zero after printing what it could read."""

from __future__ import annotations

import json

from click.testing import CliRunner

from shared.cli.main import cli
from shared.records import encode_batch


def test_a_segment_dumps_and_exits_zero(tmp_path) -> None:
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(encode_batch([(1, b"k", b"hello", None), (2, None, b"world", None)]))
    r = CliRunner().invoke(cli, ["dump-log", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "baseOffset: 0 lastOffset: 1 count: 2" in r.output and "payload: hello" in r.output
    r = CliRunner().invoke(cli, ["dump-log", str(seg), "--json"])
    assert r.exit_code == 0 and json.loads(r.output.splitlines()[0])["records"][1]["value"] == "world"


def test_a_file_that_is_not_a_segment_exits_one(tmp_path) -> None:
    bad = tmp_path / "notes.log"
    bad.write_text("hello, this is not a segment at all\n")
    r = CliRunner().invoke(cli, ["dump-log", str(bad)])
    assert r.exit_code == 1 and "not a valid segment" in r.output, r.output
    good_then_garbage = tmp_path / "x.log"
    good_then_garbage.write_bytes(encode_batch([(1, None, b"v", None)]) + b"garbage!" * 10)
    r = CliRunner().invoke(cli, ["dump-log", str(good_then_garbage)])
    assert r.exit_code == 1 and "baseOffset: 0" in r.output  # what could be read is printed first


def test_a_directory_without_segments_exits_one(tmp_path) -> None:
    r = CliRunner().invoke(cli, ["dump-log", str(tmp_path)])
    assert r.exit_code == 1 and "no segment files" in r.output
