"""The coordinator process: consumer groups (KIP-848), classic groups and offsets in ``__consumer_offsets``,
and transactions in ``__transaction_state``.

Registers under its lease, shares the partitions of both topics with the other instances
(``runtime.py``, one ``PartitionKind`` per topic) and serves the GroupCoordinator gRPC service
(``servicer.py``) and the TransactionCoordinator one (``txn_servicer.py``, ``txn_service.py``).
Stores nothing on its own disk: everything is in the topic, written through the brokers.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc
from pydantic import Field, model_validator

from services.coordinator.api import CoordinatorApi
from services.coordinator.classic_service import ClassicGroupService
from services.coordinator.config import GroupConfig
from services.coordinator.metrics import LagMonitor, coordinator_metrics
from services.coordinator.partition_kind import TRANSACTIONS, groups_kind
from services.coordinator.runtime import CoordinatorRuntime
from services.coordinator.servicer import GroupCoordinatorServicer, add_to_server
from services.coordinator.txn.config import TxnConfig
from services.coordinator.txn_service import TxnService
from services.coordinator.txn_servicer import TransactionCoordinatorServicer
from services.coordinator.txn_servicer import add_to_server as add_txn_to_server
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.security.transport import aio_channel
from shared.service import RegisteredService, run
from shared.settings import ServiceSettings


class CoordinatorSettings(ServiceSettings):
    group_consumer_session_timeout_ms: int = Field(45_000, ge=500, le=3_600_000,
                                                   description="group.consumer.session.timeout.ms")
    group_consumer_heartbeat_interval_ms: int = Field(5_000, ge=50, le=3_600_000,
                                                      description="group.consumer.heartbeat.interval.ms")
    group_consumer_max_size: int = Field(2**31 - 1, ge=1, description="group.consumer.max.size")
    offsets_retention_minutes: int = Field(7 * 24 * 60, ge=1, description="offsets.retention.minutes")
    offset_metadata_max_bytes: int = Field(4096, ge=0, description="offset.metadata.max.bytes")
    group_min_session_timeout_ms: int = Field(6_000, ge=1, le=2**31 - 1, description="group.min.session.timeout.ms")
    group_max_session_timeout_ms: int = Field(1_800_000, ge=1, le=2**31 - 1,
                                              description="group.max.session.timeout.ms")
    group_initial_rebalance_delay_ms: int = Field(3_000, ge=0, le=2**31 - 1,
                                                  description="group.initial.rebalance.delay.ms")
    group_max_size: int = Field(2**31 - 1, ge=1, description="group.max.size (classic groups)")

    @model_validator(mode="after")
    def _check_session_bounds(self) -> CoordinatorSettings:
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError(f"group.min.session.timeout.ms ({self.group_min_session_timeout_ms}) is above "
                             f"group.max.session.timeout.ms ({self.group_max_session_timeout_ms})")
        return self
    metrics_lag_interval_ms: int = Field(2000, ge=100, le=600_000,
                                         description="how often consumer lag is computed for /metrics")
    transaction_max_timeout_ms: int = Field(15 * 60_000, ge=1, le=2**31 - 1,
                                            description="transaction.max.timeout.ms")
    transactional_id_expiration_ms: int = Field(7 * 24 * 3600_000, ge=1, le=2**31 - 1,
                                                description="transactional.id.expiration.ms")
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = Field(
        10_000, ge=1, le=2**31 - 1, description="transaction.abort.timed.out.transaction.cleanup.interval.ms")
    transaction_remove_expired_transaction_cleanup_interval_ms: int = Field(
        3600_000, ge=1, le=2**31 - 1, description="transaction.remove.expired.transaction.cleanup.interval.ms")


class Coordinator(RegisteredService[CoordinatorSettings]):
    role = "coordinator"

    def __init__(self, settings: CoordinatorSettings) -> None:
        super().__init__(settings)
        s = settings
        self.group_config = GroupConfig(
            session_timeout_ms=s.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=s.group_consumer_heartbeat_interval_ms,
            max_size=s.group_consumer_max_size,
            offsets_retention_ms=s.offsets_retention_minutes * 60_000,
            offset_metadata_max_bytes=s.offset_metadata_max_bytes,
            classic_min_session_timeout_ms=s.group_min_session_timeout_ms,
            classic_max_session_timeout_ms=s.group_max_session_timeout_ms,
            classic_initial_rebalance_delay_ms=s.group_initial_rebalance_delay_ms,
            classic_max_size=s.group_max_size,
        )
        self.txn_config = TxnConfig(
            max_timeout_ms=s.transaction_max_timeout_ms,
            transactional_id_expiration_ms=s.transactional_id_expiration_ms,
            abort_timed_out_interval_ms=s.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            remove_expired_interval_ms=s.transaction_remove_expired_transaction_cleanup_interval_ms,
        )
        self.txn = TxnService(self.store, self.txn_config)
        kinds = [groups_kind(self.group_config), self.txn.kind()]
        self.runtime = CoordinatorRuntime(self.store, self.instance, "", self.group_config, kinds=kinds)
        self.txn.attach(self.runtime)
        self.classic = ClassicGroupService(self.runtime)
        self._classic_task: asyncio.Task[None] | None = None
        self._lag_task: asyncio.Task[None] | None = None
        self._metrics: Any = None
        self._channels: dict[str, grpc.aio.Channel] = {}

    def add_servicers(self, server: grpc.aio.Server) -> None:
        api = CoordinatorApi(self.runtime, self.classic)
        api.security = self.txn.security = self.security  # ACLs (services/coordinator/authz.py)
        if self.settings.metrics_port >= 0:
            api.metrics = coordinator_metrics(lambda: self.runtime.partitions)
        # Every method enters through the request context and the authorization hook (shared/request_context).
        add_to_server(GroupCoordinatorServicer(api), server)
        add_txn_to_server(TransactionCoordinatorServicer(self.txn), server)
        self._metrics = api.metrics

    def _broker_stub(self, address: str) -> pb_grpc.BrokerStub:
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = aio_channel(address)
        return pb_grpc.BrokerStub(ch)

    async def start(self) -> None:
        self.runtime.address = self.address
        self.runtime.client_address = self.client_address
        reg = await self.store.register(self.store.keys.service(self.role, self.instance), self.registration_value(),
                                        self.settings.session_timeout_s, on_lost=self.runtime.lease_lost)
        await self.txn.start()
        await self.runtime.start(reg)
        self._classic_task = asyncio.ensure_future(self.classic.run_timers())
        if self._metrics is not None:
            monitor = LagMonitor(self._metrics, self.store, lambda: self.runtime.view.brokers, self._broker_stub,
                                 self.settings.metrics_lag_interval_ms / 1000)
            self._lag_task = asyncio.ensure_future(monitor.run())

    async def stop(self) -> None:
        for task in (self._lag_task, self._classic_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self.runtime.stop()
        await self.txn.stop()
        for ch in self._channels.values():
            await ch.close()

    def ready_info(self) -> dict[str, Any]:
        return {**super().ready_info(), "partitions": sorted(self.runtime.partitions),
                "txn_partitions": sorted(self.runtime.owned.get(TRANSACTIONS, {}))}


def main() -> None:
    run(Coordinator, CoordinatorSettings)
