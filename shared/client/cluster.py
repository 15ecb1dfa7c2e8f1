"""Client-side cluster state: bootstrap, metadata cache, one gRPC channel per broker.

Thread-safe; shared by the producer's sender thread, the consumer's fetcher
thread and the application thread.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import grpc

from shared.client.security import ClientSecurity, authentication_failed
from shared.errors import ErrorCode, TidelogError, UnknownTopicOrPartitionError, error_for
from shared.netprobe import tcp_reachable
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.proto.fetch_wire import parse_fetch_response
from shared.types import TopicPartition

CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.enable_retries", 0),
]


def parse_bootstrap(servers: str | Iterable[str]) -> list[str]:
    if servers is None:  # e.g. brokers_from_data_dir() of a cluster that is not running
        raise ValueError("bootstrap_servers is None: give host:port of a broker (is the cluster running?)")
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = [s.strip() for s in items if s and s.strip()]
    if not out:
        raise ValueError("bootstrap_servers is empty")
    for s in out:
        host, sep, port = s.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bootstrap server {s!r} is not host:port")
    return out


@dataclass
class PartitionInfo:
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    error: int


@dataclass
class Snapshot:
    brokers: dict[int, str] = field(default_factory=dict)
    kafka: dict[int, str] = field(default_factory=dict)  # broker -> its Kafka listener's host:port
    topics: dict[str, dict[int, PartitionInfo]] = field(default_factory=dict)
    topic_errors: dict[str, int] = field(default_factory=dict)
    controller_rest: str = ""
    cluster_id: str = ""
    fetched_at: float = 0.0


class BrokerClientStub(pb_grpc.BrokerStub):
    """The generated stub, plus two variants that skip protobuf's copies of record batches:
    ``ProduceStreamRaw`` takes requests already serialised (shared.proto.produce_wire), and
    ``FetchStreamRaw`` returns responses as views over the received bytes (shared.proto.fetch_wire)."""

    def __init__(self, channel: grpc.Channel) -> None:
        super().__init__(channel)
        self.ProduceStreamRaw = channel.stream_stream(
            "/tidelog.v1.Broker/ProduceStream",
            request_serializer=None,
            response_deserializer=pb.ProduceResponse.FromString,
        )
        self.FetchStreamRaw = channel.stream_stream(
            "/tidelog.v1.Broker/FetchStream",
            request_serializer=pb.FetchRequest.SerializeToString,
            response_deserializer=parse_fetch_response,
        )


class ClusterClient:
    def __init__(self, bootstrap_servers: str | Iterable[str], client_id: str, request_timeout_ms: int = 30_000,
                 metadata_max_age_ms: int = 300_000, security: ClientSecurity | None = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = security  # None: PLAINTEXT (insecure channels, as always)
        self.client_id = client_id
        self.timeout = request_timeout_ms / 1000
        self.max_age = metadata_max_age_ms / 1000
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, BrokerClientStub] = {}
        self._lock = threading.RLock()
        self.snapshot = Snapshot()
        self._wanted: set[str] = set()

    # -- connections ------------------------------------------------------------------------------

    def channel(self, address: str, options: list[tuple[str, Any]] | None = CHANNEL_OPTIONS) -> grpc.Channel:
        """A new channel to ``address`` with this client's security (TLS, SCRAM session) or plaintext."""
        if self.security is None:
            return grpc.insecure_channel(address, options=options)
        return self.security.channel(address, options=options)

    def check_authentication(self, address: str) -> None:
        """Raise SASL_AUTHENTICATION_FAILED (58) if the last SCRAM handshake with ``address`` was refused
        (a wrong password is not retriable)."""
        if self.security is not None:
            err = self.security.auth_error(address)
            if err is not None:
                raise authentication_failed(f"authentication with {address} failed: {err}")

    def stub(self, address: str) -> BrokerClientStub:
        with self._lock:
            stub = self._stubs.get(address)
            if stub is None:
                ch = self.channel(address)
                self._channels[address] = ch
                stub = self._stubs[address] = BrokerClientStub(ch)
            return stub

    def forget(self, address: str) -> None:
        """Close the channel to a peer that failed, so it is only dialled again after a probe."""
        with self._lock:
            ch = self._channels.pop(address, None)
            self._stubs.pop(address, None)
        if ch is not None:
            ch.close()

    def reachable_stub(self, address: str) -> BrokerClientStub | None:
        """The stub for ``address`` if a channel exists or a plain TCP probe succeeds (see shared.netprobe)."""
        with self._lock:
            stub = self._stubs.get(address)
        if stub is not None:
            return stub
        if not tcp_reachable(address):
            return None
        return self.stub(address)

    def connected_stub(self, broker_id: int) -> BrokerClientStub | None:
        """The stub of a broker whose channel already exists, else None: no probe, no network call
        (for callers holding a lock; ``broker_stub`` dials)."""
        addr = self.snapshot.brokers.get(broker_id)
        if addr is None:
            return None
        with self._lock:
            return self._stubs.get(addr)

    def broker_stub(self, broker_id: int) -> BrokerClientStub:
        addr = self.snapshot.brokers.get(broker_id)
        if addr is None:
            raise TidelogError(f"broker {broker_id} is not known", code=ErrorCode.BROKER_NOT_AVAILABLE)
        stub = self.reachable_stub(addr)
        if stub is None:
            raise TidelogError(f"broker {broker_id} at {addr} is not reachable", code=ErrorCode.BROKER_NOT_AVAILABLE)
        return stub

    def close(self) -> None:
        with self._lock:
            for ch in self._channels.values():
                ch.close()
            self._channels.clear()
            self._stubs.clear()

    # -- metadata ---------------------------------------------------------------------------------

    def refresh(self, topics: Iterable[str] = ()) -> Snapshot:
        """Ask a broker (bootstrap or known) for metadata about ``topics`` plus every topic already wanted."""
        with self._lock:
            self._wanted.update(topics)
            wanted = sorted(self._wanted)
        candidates = list(dict.fromkeys([*self.snapshot.brokers.values(), *self.bootstrap]))
        random.shuffle(candidates)
        last: Exception | None = None
        for addr in candidates:
            stub = self.reachable_stub(addr)
            if stub is None:
                continue
            try:
                resp = stub.Metadata(pb.MetadataRequest(topics=wanted, client_id=self.client_id),
                                     timeout=min(self.timeout, 10))
            except grpc.RpcError as exc:
                last = exc
                self.check_authentication(addr)
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    self.forget(addr)
                continue
            snap = Snapshot(
                brokers={b.id: b.address for b in resp.brokers},
                kafka={b.id: b.kafka for b in resp.brokers if b.kafka},
                controller_rest=resp.controller.rest,
                cluster_id=resp.cluster_id,
                fetched_at=time.monotonic(),
            )
            for t in resp.topics:
                if t.error_code:
                    snap.topic_errors[t.name] = t.error_code
                    continue
                snap.topics[t.name] = {
                    p.partition: PartitionInfo(p.leader, p.leader_epoch, list(p.replicas), list(p.isr), p.error_code)
                    for p in t.partitions
                }
            with self._lock:
                self.snapshot = snap
            return snap
        why = f": {last.details() if isinstance(last, grpc.RpcError) else last}" if last is not None else ""
        raise TidelogError(f"no broker reachable among {candidates}{why}", code=ErrorCode.NETWORK_EXCEPTION)

    def partitions_for(self, topic: str, max_wait_s: float = 0.0) -> dict[int, PartitionInfo]:
        """Partition metadata of ``topic``, refreshing (and waiting up to ``max_wait_s``) if needed."""
        deadline = time.monotonic() + max_wait_s
        snap = self.snapshot
        parts = snap.topics.get(topic)
        if parts is not None and time.monotonic() - snap.fetched_at < self.max_age:
            return parts
        while True:
            snap = self.refresh([topic])
            parts = snap.topics.get(topic)
            if parts is not None:
                return parts
            if snap.topic_errors.get(topic) == ErrorCode.TOPIC_AUTHORIZATION_FAILED:  # as Kafka: at once, not retried
                raise error_for(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"not authorized to access topic {topic!r}")
            if time.monotonic() >= deadline:
                code = snap.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                raise UnknownTopicOrPartitionError(f"topic {topic!r} not available ({ErrorCode(code).name})")
            time.sleep(0.1)

    def leader_for(self, tp: TopicPartition) -> int:
        parts = self.snapshot.topics.get(tp.topic) or self.partitions_for(tp.topic)
        info = parts.get(tp.partition)
        if info is None:
            raise UnknownTopicOrPartitionError(f"{tp} does not exist")
        return info.leader
