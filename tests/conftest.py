"""Shared fixtures: real local clusters (real etcd, real service processes) on 127.0.0.1."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from shared.cli.launcher import ClusterSpec, LaunchError, LocalCluster, Proc

# pytest-xdist sets COLUMNS=80 in its workers, and the CLI's tables honour COLUMNS (shared/cli/console.py):
# tests read whole cells, as a pipe or a file gets them.
os.environ.pop("COLUMNS", None)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = REPO + os.pathsep + os.environ.get("PYTHONPATH", "")

#: Modules that share one Spark session (test_spark.py's ``spark`` fixture, one per worker process): with
#: ``--dist loadfile`` they form one unit of work, so the run starts one Spark (~20 s) and warms its Python
#: workers (~15 s on the first query) once, not once per worker that happens to draw one of them.
SPARK_UNIT = "tests/integration/test_spark*"


def _is_spark_module(path: str) -> bool:
    return os.path.basename(path).startswith("test_spark")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with the Spark modules as one unit, sent first (the longest unit), and the other
    modules in collection order (``pytest_collection_modifyitems``): the integration modules, then the
    short unit modules, which fill the end. xdist's own order (most tests first) sent the unit modules first
    and left the long integration modules for the end."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SparkTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return SPARK_UNIT if _is_spark_module(scope) else scope

    config.option.loadscopereorder = False
    return SparkTogether(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The Spark modules first (see ``pytest_xdist_make_scheduler``); every other test keeps its place."""
    items.sort(key=lambda item: not _is_spark_module(item.nodeid.split("::", 1)[0]))


#: Beyond pytest-timeout's limit (``timeout`` in pyproject.toml) by this much, a test is stuck where the
#: timeout's SIGALRM cannot reach it: in C code that resumes its wait after a signal (confluent-kafka's
#: ``Consumer.consume`` with a long timeout is one, measured). faulthandler's watchdog thread needs neither
#: the GIL nor the main thread: it prints every thread's stack and ends the process, which pytest-xdist
#: reports as the test that crashed its worker, and the run goes on in a new worker instead of hanging.
HANG_GRACE_S = 120.0
_hang_fd: int | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _hang_fd
    # The real stderr, kept before a test's capture redirects fd 2: the stacks must reach the run's log.
    _hang_fd = os.dup(2)


def _timeout_of(item: pytest.Item) -> float:
    """pytest-timeout's limit for ``item``, in its order: the ``timeout`` marker (positional or keyword),
    then ``--timeout`` on the command line, then the ini's ``timeout`` (300 s if neither is set)."""
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        if marker.args:
            return float(marker.args[0])
        if marker.kwargs.get("timeout") is not None:
            return float(marker.kwargs["timeout"])
    cli = item.config.getoption("timeout", None)
    if cli is not None:
        return float(cli)
    return float(item.config.getini("timeout") or 300)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    limit = _timeout_of(item)
    if _hang_fd is not None and limit > 0:
        faulthandler.dump_traceback_later(limit + HANG_GRACE_S, exit=True, file=_hang_fd)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_unconfigure(config: pytest.Config) -> None:
    # A pytest-xdist worker has sent its last report by now; if it then cannot exit (a library's non-daemon
    # thread, a stuck atexit hook), its stacks are printed and it ends instead of holding the run open.
    if _hang_fd is not None and hasattr(config, "workerinput"):
        faulthandler.dump_traceback_later(HANG_GRACE_S, exit=True, file=_hang_fd)


# Tests use a short session timeout so failover tests stay quick (etcd's minimum lease TTL is ~2 s).
TEST_SESSION_TIMEOUT_MS = 3000


class Cluster:
    """A running LocalCluster plus conveniences for tests."""

    def __init__(self, lc: LocalCluster, info: dict[str, Any]) -> None:
        self.lc = lc
        self.info = info

    @property
    def rest(self) -> str:
        return self.info["rest"]

    def procs(self, role: str) -> list[Proc]:
        return [p for p in self.lc.procs if p.role == role and (p.popen is None or p.popen.poll() is None)]

    def proc(self, role: str, ident: int | str) -> Proc:
        return next(p for p in reversed(self.lc.procs) if p.role == role and p.id == str(ident))

    def cluster_view(self, via: str | None = None) -> dict[str, Any]:
        urls = [via] if via else self.info["rest_urls"]
        last: Exception | None = None
        for url in urls:
            try:
                return httpx.get(f"{url}/v1/cluster", timeout=3).json()
            except httpx.HTTPError as exc:
                last = exc
        raise AssertionError(f"no REST endpoint answered: {last}")

    def restart(self, role: str, ident: int) -> Proc:
        """Start a stopped service again on the same port (as a fixed-port deployment would); on another one
        if some other socket took that port meanwhile (an ephemeral port: a test's bind failed on one)."""
        old = self.proc(role, ident)
        port = int(old.address.rpartition(":")[2]) if old.address else 0
        proc = self.lc.start_service(role, ident, port)
        try:
            self.lc.wait_ready([proc], 30)
        except LaunchError as exc:
            if not port or "Failed to bind to address" not in str(exc):
                raise
            proc = self.lc.start_service(role, ident, 0)
            self.lc.wait_ready([proc], 30)
        return proc


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.1, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except (httpx.HTTPError, AssertionError, OSError) as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


# Test clusters get a small __consumer_offsets (50 partitions x RF 3 would replicate for nothing in most tests).
TEST_ENV = {"TIDELOG_OFFSETS_TOPIC_NUM_PARTITIONS": "6",
            # the balancer moves replicas on its own; tests that want it turn it on
            "TIDELOG_BALANCER_ENABLE": "false"}


def start_cluster(tmp: str, **kw: Any) -> Cluster:
    kw["extra_env"] = {**TEST_ENV, **kw.get("extra_env", {})}
    kw.setdefault("fork_server", True)  # services forked from one preloaded process: ~1 s of CPU saved per start
    spec = ClusterSpec(data_dir=tmp, session_timeout_ms=kw.pop("session_timeout_ms", TEST_SESSION_TIMEOUT_MS), **kw)
    lc = LocalCluster(spec, detach=False)
    info = lc.start(timeout=90)
    return Cluster(lc, info)


@pytest.fixture
def make_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Cluster]]:
    """A factory for clusters owned by one test (for tests that kill or pause processes)."""
    clusters: list[Cluster] = []

    def make(**kw: Any) -> Cluster:
        c = start_cluster(str(tmp_path_factory.mktemp("cluster")), **kw)
        clusters.append(c)
        return c

    yield make
    for c in clusters:
        kill_cluster(c)


def kill_cluster(c: Cluster) -> None:
    """End a cluster at teardown: SIGKILL every process (services first, etcd last), then the launcher's
    stop (which finds them gone and releases its etcd watcher and lifeline). A graceful stop costs each
    cluster ~2 s of controlled shutdowns that no test looks at by then (~140 s of the suite); tests that
    check a clean shutdown stop their cluster themselves (``c.lc.stop()``)."""
    procs = sorted(c.lc.procs, key=lambda p: p.role == "etcd")
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    for p in procs:
        if p.popen is not None:
            with contextlib.suppress(Exception):
                p.popen.wait(timeout=10)
    c.lc.stop()


def stop_cluster(c: Cluster) -> None:
    """Stop a test's cluster, resuming first anything the test left paused (so SIGTERM works)."""
    for p in c.lc.procs:
        try:
            os.kill(p.pid, 18)  # SIGCONT
        except ProcessLookupError:
            pass
    c.lc.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One shared cluster for tests that do not break it."""
    c = start_cluster(str(tmp_path_factory.mktemp("shared-cluster")))
    yield c
    kill_cluster(c)


@pytest.fixture(scope="module")
def env(cluster: Cluster) -> Iterator[tuple[Cluster, str, Any]]:
    """The shared cluster, its brokers' bootstrap string and an Admin client."""
    from shared.client import Admin

    bootstrap = ",".join(p.address for p in cluster.procs("broker"))
    admin = Admin(bootstrap)
    yield cluster, bootstrap, admin
    admin.close()
