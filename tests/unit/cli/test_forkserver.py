"""The fork server (shared.cli.forkserver): a child gets the request's arguments, environment, working
directory, log file, own session and lifeline; exit codes and kills are seen through ``ForkedProcess``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.cli.forkserver import ForkServer

PROBE = "tests.unit.cli.forkprobe"


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    s = ForkServer(["json"])
    yield s
    s.close()


def test_a_child_runs_the_module_with_the_requests_arguments_environment_and_files(
        server: ForkServer, tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    read, write = os.pipe()
    os.write(write, b"alive")
    try:
        child = server.spawn([sys.executable, "-m", PROBE, "--x", "1", "--lifeline-fd", str(read), "--exit", "3"],
                             {"PROBE": "yes", "PATH": os.environ.get("PATH", "")}, str(log), lifeline=read)
    finally:
        os.close(read)
        os.close(write)
    assert child.wait(timeout=20) == 3 and child.returncode == 3
    seen = json.loads(log.read_text().splitlines()[-1])
    assert seen["name"] == "__main__" and seen["argv"][1:] == ["--x", "1", "--lifeline-fd", str(read), "--exit", "3"]
    assert seen["argv"][0].endswith("forkprobe.py")
    assert seen["env"] == "yes" and seen["cwd"] == os.getcwd()
    assert seen["sid"] == seen["pid"] == child.pid  # a session of its own, as start_new_session gives
    assert seen["lifeline"] == "alive"  # the pipe arrived at the number its arguments name


def test_kill_wait_and_poll_as_popen_does(server: ForkServer, tmp_path: Path) -> None:
    child = server.spawn([sys.executable, "-m", PROBE, "--sleep"], {}, str(tmp_path / "c.log"))
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.1)
    os.kill(child.pid, signal.SIGSTOP)  # a paused child is still running
    assert child.poll() is None
    child.kill()
    assert child.wait(timeout=10) == -signal.SIGKILL
    child.kill()  # a second kill of an exited child is a no-op, as Popen's


def test_bad_requests_are_refused_and_the_server_keeps_serving(server: ForkServer, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="python -m MODULE"):
        server.spawn(["/bin/true"], {}, str(tmp_path / "x.log"))
    missing = server.spawn([sys.executable, "-m", "no_such_module_here"], {}, str(tmp_path / "m.log"))
    assert missing.wait(timeout=10) == 1
    assert "No module named no_such_module_here" in (tmp_path / "m.log").read_text()
    ok = server.spawn([sys.executable, "-m", PROBE], {}, str(tmp_path / "ok.log"))
    assert ok.wait(timeout=10) == 0


def test_a_preloaded_modules_warm_up_runs_once_in_the_server_before_any_fork(tmp_path: Path) -> None:
    s = ForkServer(["json", "tests.unit.cli.forkwarm"])
    try:
        logs = [tmp_path / f"c{i}.log" for i in range(2)]
        children = [s.spawn([sys.executable, "-m", PROBE], {}, str(log)) for log in logs]
        assert [c.wait(timeout=20) for c in children] == [0, 0]
        seen = [json.loads(log.read_text().splitlines()[-1]) for log in logs]
        assert seen[0]["warmed"] == seen[1]["warmed"] == [s.popen.pid]  # the server's, once, inherited
    finally:
        s.close()


def test_a_server_that_died_is_reported_and_shared_starts_a_new_one(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Not this worker's own shared server: integration tests in this process fork their services from it.
    monkeypatch.setattr(ForkServer, "_shared", None)
    first = ForkServer.shared(["json"])
    first.popen.kill()
    first.popen.wait()
    with pytest.raises(RuntimeError, match="fork server gone"):
        first.spawn([sys.executable, "-m", PROBE], {}, str(tmp_path / "a.log"))
    second = ForkServer.shared(["json"])
    assert second is not first
    assert second.spawn([sys.executable, "-m", PROBE], {}, str(tmp_path / "b.log")).wait(timeout=10) == 0
    second.close()
