"""The broker process: registers under its lease, hosts partitions, serves produce/fetch over gRPC."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

import grpc
from prometheus_client import REGISTRY
from pydantic import Field

from services.broker.api import BrokerApi
from services.broker.cleaner_check import ResultChecker
from services.broker.cleaner_metrics import CleanerCollector
from services.broker.cleaner_service import CleanerJobs, CleanerServicer, add_cleaner_servicer
from services.broker.kafka.cluster_links import ClusterLinks
from services.broker.kafka.listener import KafkaListener, parse_ip_overrides
from services.broker.kafka.registry import kafka_apis, load_schemas
from services.broker.metadata_cache import ClusterView, MetadataCache
from services.broker.metrics import broker_metrics, register_partitions
from services.broker.pipeline import RequestPipeline
from services.broker.quota_client import QuotaReporter
from services.broker.quota_state import QuotaAccounting
from services.broker.replica_manager import ReplicaManager
from services.broker.replication_throttle import ReplicationThrottles, effective_broker_configs
from services.broker.server import BrokerServicer, add_broker_servicer
from services.broker.throttle_metrics import ThrottleCollector
from services.broker.txn_verify import TxnVerifier
from shared.coordinator_lookup import request_internal_topic
from shared.proto import tidelog_pb2 as pb
from shared.quota.decision import ProvisionalQuotas
from shared.quota.entities import parse_configs
from shared.security.access import DISABLED, Access
from shared.service import Service, connection_creation_rate, run
from shared.settings import ServiceSettings

log = logging.getLogger(__name__)


class BrokerSettings(ServiceSettings):
    rack: str | None = Field(None, description="broker.rack for rack-aware replica assignment")
    housekeeping_interval_ms: int = Field(
        1000, ge=10, le=600_000, description="how often retention, flush.ms and HW checkpoints run"
    )
    replica_lag_time_max_ms: int = Field(30_000, ge=100, le=3_600_000, description="replica.lag.time.max.ms")
    replica_fetch_wait_max_ms: int = Field(500, ge=1, le=60_000, description="replica.fetch.wait.max.ms")
    controlled_shutdown_enable: bool = Field(True, description="controlled.shutdown.enable")
    controlled_shutdown_timeout_ms: int = Field(10_000, ge=0, le=600_000,
                                                description="how long a stopping broker waits for its leaderships to move")
    log_cleaner_lease_ms: int = Field(30_000, ge=100, le=3_600_000,
                                      description="how long a cleaner worker holds a compaction job without renewing")
    log_cleaner_dedupe_buffer_size: int = Field(128 * 1024 * 1024, ge=1024, le=2**34,
                                                description="log.cleaner.dedupe.buffer.size: offset map bytes per job")
    log_cleaner_check_processes: int = Field(
        2, ge=1, le=64, description="how many cleaning results the broker checks at once, each in a child process "
                                    "started when first needed")
    quota_report_interval_ms: int = Field(100, ge=10, le=10_000,
                                          description="quota.report.interval.ms: how often usage goes to the quota service")
    kafka_port: int = Field(0, ge=-1, le=65535,
                            description="Kafka-protocol listener port (0: any free port, -1: no Kafka listener)")
    listeners: str | None = Field(None, description="listeners: the Kafka listener to bind, as Kafka's "
                                                    "PLAINTEXT://host:port (overrides --host and --kafka-port)")
    advertised_listeners: str | None = Field(None, description="advertised.listeners: what Kafka clients are told, "
                                                               "PLAINTEXT://host:port (default: the bound listener)")
    auto_create_topics_enable: bool = Field(True, description="auto.create.topics.enable: Kafka clients' Metadata "
                                                              "requests create missing topics when they allow it")
    num_partitions: int = Field(1, ge=1, le=100_000, description="num.partitions of auto-created topics")
    default_replication_factor: int = Field(1, ge=1, le=100, description="default.replication.factor of "
                                                                         "auto-created topics")
    socket_request_max_bytes: int = Field(100 * 1024 * 1024, ge=1024, le=2**31 - 1,
                                          description="socket.request.max.bytes: larger Kafka requests are refused")
    connections_max_idle_ms: int = Field(600_000, ge=100, le=2**31 - 1,
                                         description="connections.max.idle.ms: idle Kafka connections are closed")
    max_connections_per_ip: int = Field(2**31 - 1, ge=0, le=2**31 - 1,
                                        description="max.connections.per.ip on the Kafka listener (unlimited, as Kafka)")
    max_connections_per_ip_overrides: str = Field("", description="max.connections.per.ip.overrides: "
                                                                  "'host:count,host:count'")
    quota_window_size_seconds: int = Field(1, ge=1, le=60, description="quota.window.size.seconds; decisions "
                                                                       "older than two windows are dropped (fail open)")
    transaction_partition_verification_enable: bool = Field(
        True, description="transaction.partition.verification.enable (KIP-890): a transaction's first batch on a "
                          "partition is appended only once its transaction coordinator confirms the partition")


class Broker(Service[BrokerSettings]):
    role = "broker"

    def __init__(self, settings: BrokerSettings) -> None:
        super().__init__(settings)
        # A new incarnation per process start, so a restarted broker is told apart from its past self.
        self.incarnation = f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"
        self.replicas = ReplicaManager(settings.id, settings.data_dir,
                                       replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
                                       replica_fetch_wait_max_ms=settings.replica_fetch_wait_max_ms,
                                       incarnation=self.incarnation)
        self.metadata = MetadataCache(self.store, self._on_metadata)
        # Replication throttles (broker configs *.replication.throttled.rate), read by the fetch paths.
        self.replicas.replication_throttle = ReplicationThrottles(settings.id)  # type: ignore[attr-defined]
        self.cleaner_jobs = CleanerJobs(self.replicas, self.replicas.clock, settings.log_cleaner_lease_ms,
                                        settings.log_cleaner_dedupe_buffer_size,
                                        checker=ResultChecker(processes=settings.log_cleaner_check_processes))
        interval_s = settings.quota_report_interval_ms / 1000
        self.quota_accounting = QuotaAccounting(interval_s, 2 * settings.quota_window_size_seconds,
                                                ProvisionalQuotas(window_ms=settings.quota_window_size_seconds * 1000))
        self.quota_reporter = QuotaReporter(self._active_quota_instance, self.quota_accounting, settings.id, interval_s)
        self._tasks: list[asyncio.Task[Any]] = []
        self._pid_next = 0
        self._pid_end = 0
        self._pid_lock = asyncio.Lock()
        self.coordinator_owners: dict[int, dict[str, Any]] = {}  # for FindCoordinator
        self.txn_coordinator_owners: dict[int, dict[str, Any]] = {}  # for FindCoordinator of transactional ids
        self._internal_topics_requested: set[str] = set()
        self._metrics: Any = None
        self._cleaner_metrics: CleanerCollector | None = None
        self.api: BrokerApi | None = None  # set with the servicers
        self.kafka_listener: KafkaListener | None = None
        self.kafka_address = ""  # host:port told to Kafka clients ("" without a Kafka listener)

    def add_servicers(self, server: grpc.aio.Server) -> None:
        pipeline = RequestPipeline(self.quota_accounting)
        # ACL decisions for both doors and the LogCleaner service (DISABLED when plaintext: allow all)
        access = Access(self.security) if self.security.enabled else DISABLED
        pipeline.access = self.cleaner_jobs.access = access
        if self.settings.metrics_port >= 0:
            self._setup_metrics(pipeline)
        servicer = BrokerServicer(self.replicas, self.settings.id, self.allocate_producer_id,
                                  lambda: self.coordinator_owners, pipeline=pipeline)
        add_broker_servicer(servicer, server)
        self.api = servicer.api
        self.api.txn_coordinator_owners = lambda: self.txn_coordinator_owners
        self.api.request_internal_topic = self._request_internal_topic
        if self.settings.transaction_partition_verification_enable:
            self.replicas.transaction_verification = True
            self.api.txn_verifier = TxnVerifier(self.replicas, lambda: self.txn_coordinator_owners)
        s = self.settings
        self.api.configs = {"auto.create.topics.enable": s.auto_create_topics_enable,
                            "num.partitions": s.num_partitions,
                            "default.replication.factor": s.default_replication_factor}
        add_cleaner_servicer(CleanerServicer(self.cleaner_jobs, self.settings.id), server)

    def _setup_metrics(self, pipeline: RequestPipeline) -> None:
        metrics = pipeline.metrics = broker_metrics()
        register_partitions(lambda: self.replicas.partitions)

        def isr_changed(old: int, new: int) -> None:
            if new != old:
                (metrics.isr_shrinks if new < old else metrics.isr_expands).inc()

        self.replicas.on_isr_change = isr_changed
        self._metrics = metrics
        self._cleaner_metrics = CleanerCollector(self.settings.id)
        REGISTRY.register(self._cleaner_metrics)
        REGISTRY.register(ThrottleCollector(self.replicas.replication_throttle))  # type: ignore[attr-defined]

    async def _active_quota_instance(self) -> str | None:
        found = await self.store.get(self.store.keys.quota_leader())
        return found[0].get("address") if found else None

    async def allocate_producer_id(self) -> int:
        """Producer ids come from blocks of 1000 reserved atomically in etcd."""
        async with self._pid_lock:
            if self._pid_next >= self._pid_end:
                self._pid_next = await self.store.allocate_block(self.store.keys.producer_ids(), 1000)
                self._pid_end = self._pid_next + 1000
            pid = self._pid_next
            self._pid_next += 1
            return pid

    async def _on_metadata(self, view: ClusterView) -> None:
        await self.replicas.apply_metadata(view)
        if self._metrics is not None:
            self._metrics.known_topics({tp.topic for tp in self.replicas.partitions})

    async def _start_kafka_listener(self) -> None:
        s = self.settings
        if s.kafka_port < 0 and not s.listeners:
            return
        host, port = s.host, s.kafka_port
        if s.listeners:
            host, port = parse_listener(s.listeners, "listeners")
        assert self.api is not None  # add_servicers ran
        self.api.links = ClusterLinks(self.replicas, self.store, self.api.configs)
        self.kafka_listener = KafkaListener(
            kafka_apis(self.api), max_request_bytes=s.socket_request_max_bytes, max_idle_ms=s.connections_max_idle_ms,
            max_connections_per_ip=s.max_connections_per_ip,
            max_connections_per_ip_overrides=parse_ip_overrides(s.max_connections_per_ip_overrides),
            connection_creation_rate=connection_creation_rate(s), security=self.security)
        try:
            bound = await self.kafka_listener.start(host, port)
        except OSError as exc:
            raise SystemExit(f"broker: cannot listen for Kafka clients on {host}:{port} ({exc.strerror})") from None
        if s.advertised_listeners:
            adv_host, adv_port = parse_listener(s.advertised_listeners, "advertised_listeners")
        else:
            adv_host, adv_port = (s.advertised if host in ("0.0.0.0", "", "::") else host), bound
        self.kafka_address = f"{adv_host}:{adv_port}"
        log.info("Kafka listener up", extra={"listener": f"PLAINTEXT://{host}:{bound}", "advertised": self.kafka_address})

    async def start(self) -> None:
        s = self.settings
        await self._start_kafka_listener()
        await self.store.register(
            self.store.keys.broker(s.id),
            {"id": s.id, "address": self.address, "rack": s.rack, "incarnation": self.incarnation,
             "metrics": self.metrics_address, "kafka": self.kafka_address,
             **({"client_address": self.client_address} if self.client_address else {})},
            s.session_timeout_s,
            on_lost=self._on_lease_lost,
        )
        opening = time.monotonic()
        await self.metadata.start()
        self.store.watch_prefix(self.store.keys.offsets_owners_prefix(), self._on_coordinator_owners, "offsets owners")
        self.store.watch_prefix(self.store.keys.txn_owners_prefix(), self._on_txn_coordinator_owners, "txn owners")
        self.store.watch_prefix(self.store.keys.quotas_prefix(), self._on_quota_configs, "quotas")
        self.store.watch_prefix(self.store.keys.broker_configs_prefix(), self._on_broker_configs, "broker configs")
        await asyncio.wait_for(self.metadata.ready.wait(), 30)
        if self._metrics is not None:  # the first metadata opened (and recovered) the logs
            self._metrics.recovery_seconds.set(time.monotonic() - opening)
        self._tasks.append(asyncio.create_task(self._housekeeping()))
        self._tasks.append(asyncio.create_task(self._isr_loop()))
        self._tasks.append(asyncio.create_task(self.quota_reporter.run()))

    def _on_coordinator_owners(self, snap: dict[bytes, tuple[Any, int, int]]) -> None:
        self.coordinator_owners = {int(k.decode().rsplit("/", 1)[-1]): v for k, (v, _, _) in snap.items()}

    def _on_txn_coordinator_owners(self, snap: dict[bytes, tuple[Any, int, int]]) -> None:
        self.txn_coordinator_owners = {int(k.decode().rsplit("/", 1)[-1]): v for k, (v, _, _) in snap.items()}

    def _request_internal_topic(self, topic: str) -> None:
        """Ask the controller for an internal topic made on first use, once per process (again after a failure)."""
        if topic in self._internal_topics_requested:
            return
        self._internal_topics_requested.add(topic)

        async def ask() -> None:
            try:
                await request_internal_topic(self.store, topic, f"broker-{self.settings.id}")
            except Exception as exc:
                self._internal_topics_requested.discard(topic)
                log.info("internal topic request failed", extra={"topic": topic, "error": str(exc)})

        self._tasks.append(asyncio.ensure_future(ask()))

    def _on_quota_configs(self, snap: dict[bytes, tuple[Any, int, int]]) -> None:
        """The quota entries, for provisional decisions on pairs the quota service has not decided yet."""
        self.quota_accounting.set_configs(parse_configs(self.store.keys.quotas_prefix(), snap))

    def _on_broker_configs(self, snap: dict[bytes, tuple[Any, int, int]]) -> None:
        own = snap.get(self.store.keys.broker_config(self.settings.id))
        default = snap.get(self.store.keys.broker_config("<default>"))
        self.replicas.replication_throttle.set_broker_configs(  # type: ignore[attr-defined]
            effective_broker_configs(own[0] if own else None, default[0] if default else None))

    def _on_lease_lost(self) -> None:
        self.replicas.fence()
        self.metadata.refresh_soon()

    async def _isr_loop(self) -> None:
        interval = min(0.1, self.settings.replica_lag_time_max_ms / 4000)
        while True:
            await asyncio.sleep(interval)
            self.replicas.maintain_isr()

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(self.settings.housekeeping_interval_ms / 1000)
            self.replicas.housekeeping()
            await self.replicas.checkpoint_high_watermarks()
            self.cleaner_jobs.housekeeping()
            if self._cleaner_metrics is not None:
                self._cleaner_metrics.refresh(self.cleaner_jobs)

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move our leaderships away, then wait until metadata shows it."""
        deadline = asyncio.get_running_loop().time() + self.settings.controlled_shutdown_timeout_ms / 1000
        while asyncio.get_running_loop().time() < deadline:
            stub = await self.replicas.controller_stub()
            if stub is not None:
                try:
                    resp = await stub.ControlledShutdown(pb.ControlledShutdownRequest(
                        broker_id=self.settings.id, incarnation=self.incarnation), timeout=5)
                    if resp.error_code == 0:
                        while self.replicas.leader_count() > resp.remaining_leaderships:
                            if asyncio.get_running_loop().time() >= deadline:
                                break
                            await asyncio.sleep(0.02)
                        log.info("controlled shutdown done", extra={"still_leading": self.replicas.leader_count()})
                        return
                except grpc.aio.AioRpcError as exc:
                    log.info("controlled shutdown request failed", extra={"error": str(exc.code())})
                    await self.replicas.forget_controller()
            await asyncio.sleep(0.2)
        log.warning("controlled shutdown timed out")

    async def stop(self) -> None:
        if self.settings.controlled_shutdown_enable and self.replicas.leader_count():
            with contextlib.suppress(Exception):
                await self._controlled_shutdown()
        for t in self._tasks:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self.kafka_listener is not None:
            await self.kafka_listener.stop()
        if self.api is not None and self.api.links is not None:
            await self.api.links.close()
        self.cleaner_jobs.checker.close()
        await self.replicas.close()

    def ready_info(self) -> dict[str, Any]:
        return {**super().ready_info(), "rack": self.settings.rack, "kafka": self.kafka_address}


def parse_listener(value: str, name: str) -> tuple[str, int]:
    """``PLAINTEXT://host:port`` (Kafka's listener syntax; one listener, PLAINTEXT until security exists)."""
    proto, sep, rest = value.strip().partition("://")
    if not sep or proto.upper() != "PLAINTEXT" or "," in rest:
        raise SystemExit(f"broker: --{name.replace('_', '-')} {value!r}: expected one PLAINTEXT://host:port")
    host, _, port = rest.rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise SystemExit(f"broker: --{name.replace('_', '-')} {value!r}: bad port")
    return host.strip("[]"), int(port)


def fork_server_warm() -> None:
    """Run once by a fork server (``shared.cli.forkserver``) before it forks brokers."""
    load_schemas()


def main() -> None:
    run(Broker, BrokerSettings)
