"""The controller process: election, REST admin API, metadata writes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import uuid
from typing import Any

import grpc
import uvicorn
from pydantic import Field

from services.controller.api import ControllerApi
from services.controller.balancer_loop import BalancerConfig, BalancerLoop, BalancerSettings
from services.controller.election import ControllerElection, ControllerIdentity
from services.controller.grpc_api import ControllerServicer, add_to_server
from services.controller.internal_topics import ensure_offsets_topic
from services.controller.leader_balance import LeaderBalancer
from services.controller.metrics import controller_observer
from services.controller.replication import PartitionController
from services.controller.rest.app import create_app
from services.controller.topics import TopicManager
from shared.security.transport import reload_ssl_context, uvicorn_tls
from shared.service import Service, run

log = logging.getLogger(__name__)


class ControllerSettings(BalancerSettings):  # the balancer.* settings (balancer_loop.py)
    rest_host: str = Field("127.0.0.1", description="REST admin API listen address")
    rest_port: int = Field(0, ge=0, le=65535, description="REST admin API port (0: any free port)")
    auto_leader_rebalance_enable: bool = Field(True, description="auto.leader.rebalance.enable")
    leader_imbalance_check_interval_seconds: int = Field(
        300, ge=1, le=86_400, description="leader.imbalance.check.interval.seconds"
    )
    leader_imbalance_per_broker_percentage: float = Field(
        10.0, ge=0, le=100, description="leader.imbalance.per.broker.percentage"
    )
    offsets_topic_num_partitions: int = Field(50, ge=1, le=1000, description="offsets.topic.num.partitions")
    offsets_topic_replication_factor: int = Field(3, ge=1, le=10, description="offsets.topic.replication.factor")


class Controller(Service[ControllerSettings]):
    role = "controller"

    def __init__(self, settings: ControllerSettings) -> None:
        super().__init__(settings)
        self.rest_url = ""
        # The request layer both doors call; the election and the managers join it in start().
        self.api = ControllerApi(self.store)
        self.api.security = self.security  # ACLs for both doors (services/controller/authz.py)
        self._rest: uvicorn.Server | None = None
        self._tasks: list[asyncio.Task[Any]] = []

    def add_servicers(self, server: grpc.aio.Server) -> None:
        # Every method enters through the request context and the authorization hook (shared/request_context),
        # and is handed the context it entered with, for its API function.
        add_to_server(ControllerServicer(self.api), server)

    async def start(self) -> None:
        s = self.settings
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((s.rest_host, s.rest_port))
        rest_port = sock.getsockname()[1]
        scheme = "https" if self.tls is not None else "http"  # secure: HTTPS with this controller's certificate
        self.rest_url = f"{scheme}://{s.advertised_host or s.rest_host}:{rest_port}"
        await self.store.create(self.store.keys.cluster_id(), uuid.uuid4().hex)
        await self.store.register(
            self.store.keys.service("controller", s.id),
            {"address": self.address, "rest": self.rest_url, "metrics": self.metrics_address,
             **({"client_address": self.client_address} if self.client_address else {})},
            s.session_timeout_s,
        )
        election = ControllerElection(
            self.store, ControllerIdentity(s.id, self.address, self.rest_url), s.session_timeout_s
        )
        topics = TopicManager(self.store, election)
        partitions = PartitionController(
            self.store, election, auto_leader_rebalance=False,  # the LeaderBalancer below applies Kafka's rule
            rebalance_interval_s=s.leader_imbalance_check_interval_seconds,
        )
        leader_balancer = LeaderBalancer(
            partitions, lambda: election.active, enabled=s.auto_leader_rebalance_enable,
            percentage=s.leader_imbalance_per_broker_percentage,
            interval_s=s.leader_imbalance_check_interval_seconds,
            reassigning=lambda: partitions.reassigning,  # Kafka leaves partitions being reassigned alone
        )
        if s.metrics_port >= 0:
            observer = controller_observer(lambda: election.epoch)
            election.on_txn = observer.txn
            partitions.observer = observer
        self.api.election, self.api.topics, self.api.partitions = election, topics, partitions
        config = uvicorn.Config(create_app(self.api), log_config=None, access_log=False, lifespan="off",
                                **uvicorn_tls(self.tls))
        self._rest = uvicorn.Server(config)
        self._rest.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        self._tasks.append(asyncio.create_task(self._rest.serve(sockets=[sock])))
        self._tasks.append(asyncio.create_task(election.run()))
        self._tasks.append(asyncio.create_task(partitions.run()))
        self._tasks.append(asyncio.create_task(leader_balancer.run()))
        balancer = BalancerLoop(self.api, BalancerConfig.of(s), lambda: election.active)
        self.api.balancer = balancer
        self._tasks.append(asyncio.create_task(balancer.run()))
        self._tasks.append(asyncio.create_task(ensure_offsets_topic(
            topics, election, s.offsets_topic_num_partitions, s.offsets_topic_replication_factor)))
        while not self._rest.started:
            await asyncio.sleep(0.02)
        if self.tls is not None and config.ssl is not None:
            self._tasks.append(asyncio.create_task(reload_ssl_context(config.ssl, self.tls)))

    async def stop(self) -> None:
        election_task = self._tasks[1] if len(self._tasks) > 1 else None
        if election_task is not None:
            election_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await election_task
        if self.api.election is not None:
            await self.api.election.resign()  # a standby takes over at once
        if self._rest is not None:
            self._rest.should_exit = True
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    def ready_info(self) -> dict[str, Any]:
        return {**super().ready_info(), "rest": self.rest_url}


def main() -> None:
    run(Controller, ControllerSettings)
