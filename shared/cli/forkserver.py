"""Start service processes by ``fork()`` from one process that has already imported them.

Importing a service costs about one second of CPU (gRPC, protobuf, pydantic, numpy and the service's own
modules); a test suite that starts hundreds of services spends much of its time there. The fork server is
``python -m shared.cli.forkserver --preload MODULE ...``: it imports the modules it is told, starts no
thread and no event loop, and then forks one child per request. Each child is a real, separate process:
its own session, its own log file on stdout and stderr, the environment, working directory and arguments
of the request, and it runs ``python -m MODULE ARGS`` exactly as a fresh interpreter would (``runpy``).

The launcher (``LocalCluster`` with ``ClusterSpec(fork_server=True)``: what the tests use; ``tidelog up``
execs each service) talks to it over a Unix socket pair: length-prefixed JSON requests, and the lifeline
pipe's read end passed along with ``SCM_RIGHTS``. The server reaps its children as they exit and keeps
their exit codes, which ``ForkedProcess.poll`` asks for: a ``subprocess.Popen`` stand-in for processes
that are not the launcher's own children.

A preloaded module may define ``fork_server_warm()``: the server calls it after the imports, for work every
child would otherwise repeat at its start (the broker loads the Kafka listener's message classes there).

Safe because nothing in the server has started a thread (gRPC core, asyncio and OpenBLAS start theirs
only when first used; ``GRPC_ENABLE_FORK_SUPPORT`` is off), so the children inherit no half-held lock.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import runpy
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any

_HEADER = struct.Struct("!I")
_MAX_FDS = 1


def _send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    frame = _HEADER.pack(len(data)) + data
    if fds:
        socket.send_fds(sock, [frame[:1]], fds)
        sock.sendall(frame[1:])
    else:
        sock.sendall(frame)


def _recv_exact(sock: socket.socket, n: int, fds: list[int]) -> bytes | None:
    chunks: list[bytes] = []
    while n:
        data, got, _flags, _addr = socket.recv_fds(sock, n, _MAX_FDS)
        fds.extend(got)
        if not data:
            return None
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)


def _recv(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    fds: list[int] = []
    header = _recv_exact(sock, _HEADER.size, fds)
    if header is None:
        return None, fds
    body = _recv_exact(sock, _HEADER.unpack(header)[0], fds)
    return (None if body is None else json.loads(body)), fds


# -- the server ---------------------------------------------------------------------------------------


class _Job:
    def __init__(self, module: str, args: list[str]) -> None:
        self.module, self.args = module, args


def _reap(codes: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        codes[pid] = os.waitstatus_to_exitcode(status)


def _become_child(sock: socket.socket, request: dict[str, Any], fds: list[int]) -> _Job:
    """In the forked child: take on the request's session, files, environment and arguments."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    sock.close()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    target = request.get("lifeline")
    if fds and target is not None:  # the lifeline's read end, at the number the arguments name
        if fds[0] != target:
            os.dup2(fds[0], target)
            os.close(fds[0])
        os.set_inheritable(target, True)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # PYTHONUNBUFFERED's effect, as a fresh interpreter started with it would have.
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True, line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True, line_buffering=True,
                                  errors="backslashreplace")
    return _Job(request["module"], request["args"])


def serve(sock: socket.socket) -> _Job | None:
    """Answer requests until the launcher closes its end; in a forked child, return what it runs."""
    codes: dict[int, int] = {}
    signal.signal(signal.SIGCHLD, lambda *_: _reap(codes))
    while True:
        request, fds = _recv(sock)
        if request is None:
            return None
        if "poll" in request:
            _reap(codes)
            _send(sock, {"code": codes.get(request["poll"])})
            continue
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            _send(sock, {"error": str(exc)})
            continue
        if pid == 0:
            return _become_child(sock, request, fds)
        for fd in fds:
            os.close(fd)
        _send(sock, {"pid": pid})


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m shared.cli.forkserver")
    parser.add_argument("--fd", type=int, required=True, help="this end of the launcher's socket pair")
    parser.add_argument("--preload", action="append", default=[], help="a module to import before forking")
    opts = parser.parse_args()
    for name in opts.preload:
        importlib.import_module(name)
    for name in opts.preload:  # work every child would repeat at its start, done once here
        warm = getattr(sys.modules[name], "fork_server_warm", None)
        if callable(warm):
            warm()
    if threading.active_count() != 1:  # a preloaded module started a thread: forking would be unsafe
        raise SystemExit(f"fork server: {threading.active_count()} threads after the preloads; refusing to fork")
    job = serve(socket.socket(fileno=opts.fd))
    if job is not None:
        sys.argv = [job.module, *job.args]
        runpy.run_module(job.module, run_name="__main__", alter_sys=True)


# -- the launcher's side ------------------------------------------------------------------------------


class ForkedProcess:
    """The part of ``subprocess.Popen`` the launcher and the tests use, for a fork server's child."""

    def __init__(self, server: ForkServer, pid: int, args: list[str]) -> None:
        self.server, self.pid, self.args = server, pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.02)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """One fork server per launcher process, started on first use (``shared()``)."""

    _shared: ForkServer | None = None
    _shared_lock = threading.Lock()

    def __init__(self, preload: list[str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = [sys.executable, "-m", "shared.cli.forkserver", "--fd", str(theirs.fileno())]
        for name in preload:
            argv += ["--preload", name]
        self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      pass_fds=(theirs.fileno(),), start_new_session=True)
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()
        self.dead: str | None = None  # why the server is gone: its children's codes are unknown from then on

    @classmethod
    def shared(cls, preload: list[str]) -> ForkServer:
        with cls._shared_lock:
            if cls._shared is None or cls._shared.dead is not None:
                cls._shared = cls(preload)
            return cls._shared

    def _call(self, request: dict[str, Any], fds: list[int] | None = None) -> dict[str, Any]:
        with self.lock:
            if self.dead is not None:
                raise RuntimeError(f"fork server gone: {self.dead}")
            try:
                _send(self.sock, request, fds)
                reply, got = _recv(self.sock)
            except OSError as exc:
                reply, got = None, []
                self.dead = str(exc)
            for fd in got:
                os.close(fd)
            if reply is None:
                self.dead = self.dead or f"exited with {self.popen.poll()}"
                raise RuntimeError(f"fork server gone: {self.dead}")
            return reply

    def spawn(self, argv: list[str], env: dict[str, str], log_path: str, lifeline: int | None = None) -> ForkedProcess:
        """Start ``argv`` (``[python, "-m", MODULE, *args]``) as a child of the server."""
        if len(argv) < 3 or argv[1] != "-m":
            raise ValueError(f"the fork server runs python -m MODULE only, not {argv}")
        request = {"module": argv[2], "args": argv[3:], "env": env, "cwd": os.getcwd(), "log": log_path,
                   "lifeline": lifeline}
        reply = self._call(request, [lifeline] if lifeline is not None else None)
        if "error" in reply:
            raise OSError(f"fork server could not start {argv[2]}: {reply['error']}")
        return ForkedProcess(self, int(reply["pid"]), argv)

    def exit_code(self, pid: int) -> int | None:
        try:
            code = self._call({"poll": pid})["code"]
        except RuntimeError:  # the server is gone: a child still running is one /proc still shows
            return None if _alive(pid) else -1
        return None if code is None else int(code)

    def close(self) -> None:
        with self.lock:
            self.sock.close()
            self.dead = self.dead or "closed"
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


if __name__ == "__main__":
    main()
