"""Where a Kafka client's group request goes: the coordinator service instance that owns the group's
``__consumer_offsets`` partition (ownership keys in etcd, as every broker follows them), over its gRPC
API. Brokers forward group requests rather than sending Kafka clients to the coordinator: Kafka clients
only know brokers (those in Metadata), and one Kafka listener implementation serves every API.

An owner that cannot be reached, or that answers it no longer owns the group, comes back as Kafka's
``NOT_COORDINATOR`` (retriable: the client finds the coordinator again and retries).
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from shared.errors import ErrorCode
from shared.offsets_topic import OFFSETS_TOPIC, locate
from shared.proto import coordinator_pb2_grpc as cpb_grpc
from shared.proto import transactions_pb2_grpc as tpb_grpc
from shared.security.transport import aio_channel
from shared.service import GRPC_OPTIONS
from shared.txn_topic import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)
DEFAULT_TIMEOUT_S = 30.0


class NoCoordinator(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class CoordinatorRouter:
    """Routes by group id over ``__consumer_offsets`` to ``GroupCoordinator``; ``TxnRouter`` (below) by
    transactional id over ``__transaction_state`` to ``TransactionCoordinator``."""

    topic_name = OFFSETS_TOPIC
    stub_class: Any = cpb_grpc.GroupCoordinatorStub

    def __init__(self, broker: Any) -> None:
        self.broker = broker  # services.broker.api.BrokerApi
        self._channels: dict[str, tuple[grpc.aio.Channel, Any]] = {}

    def owners(self) -> dict[int, dict[str, Any]]:
        return dict(self.broker.coordinator_owners())

    def _stub(self, address: str) -> Any:
        found = self._channels.get(address)
        if found is None:
            channel = aio_channel(address, options=GRPC_OPTIONS)  # TLS with the broker's certificate when secure
            found = self._channels[address] = (channel, self.stub_class(channel))
        return found[1]

    def address_for(self, group_id: str) -> str:
        """The gRPC address of the coordinator owning ``group_id`` (raises ``NoCoordinator``)."""
        topic = self.broker.rm.view.topics.get(self.topic_name)
        if topic is None or not topic.assignment:
            raise NoCoordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{self.topic_name} does not exist yet")
        p, owner = locate(group_id, len(topic.assignment), self.owners())
        if owner is None or not owner.get("address"):
            raise NoCoordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                f"no coordinator owns {self.topic_name} partition {p} yet")
        return str(owner["address"])

    def all_addresses(self) -> list[str]:
        return sorted({str(o["address"]) for o in self.owners().values() if o.get("address")})

    async def call(self, group_id: str, method: str, request: Any, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
        """Call ``method`` on the group's coordinator (raises ``NoCoordinator``)."""
        return await self.call_at(self.address_for(group_id), method, request, timeout_s)

    async def call_at(self, address: str, method: str, request: Any, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
        try:
            return await getattr(self._stub(address), method)(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            log.info("request to the coordinator failed",
                     extra={"coordinator": address, "method": method, "code": str(exc.code())})
            raise NoCoordinator(ErrorCode.NOT_COORDINATOR, f"coordinator {address}: {exc.code().name}") from None

    async def close(self) -> None:
        for channel, _ in self._channels.values():
            await channel.close()
        self._channels.clear()


class TxnRouter(CoordinatorRouter):
    """Transaction requests to the coordinator owning the transactional id's ``__transaction_state``
    partition (``BrokerApi.txn_coordinator_owners``)."""

    topic_name = TRANSACTION_STATE_TOPIC
    stub_class = tpb_grpc.TransactionCoordinatorStub

    def owners(self) -> dict[int, dict[str, Any]]:
        return dict(self.broker.txn_coordinator_owners())
