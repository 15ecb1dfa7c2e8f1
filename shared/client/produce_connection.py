"""One pipelined ``ProduceStream`` to a broker (the producer's side of Kafka's NetworkClient for Produce).

Requests go out already serialised, up to ``max_in_flight`` at a time; a reader thread matches each
response to its request in order and hands it to the ``ProduceResponseHandler`` (the sender). This is
the producer's one boundary with gRPC streaming errors: a broken or timed-out stream fails every request
still in flight with a ``TidelogError`` (NETWORK_EXCEPTION or REQUEST_TIMED_OUT). What to do about a
failure is the sender's business, not this module's. Must not import the sender or the producer.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import grpc

from shared.client.cluster import ClusterClient
from shared.client.grpc_calls import forget_traceback
from shared.client.producer_batch import ProducerBatch
from shared.errors import ErrorCode, TidelogError
from shared.proto import tidelog_pb2 as pb
from shared.types import TopicPartition

log = logging.getLogger("shared.client.producer")  # every producer log line under one name, as before the split


@dataclass
class InFlight:
    correlation_id: int
    batches: dict[TopicPartition, ProducerBatch]
    acks: int
    sent_at: float = 0.0


class ProduceResponseHandler(Protocol):
    """What a connection reports to (the sender), from its reader thread."""

    closing: bool  # the producer is closing: a cancelled stream is expected, not worth a log line

    def on_response(self, entry: InFlight, resp: pb.ProduceResponse) -> None: ...

    def on_failure(self, entry: InFlight, error: TidelogError) -> None: ...

    def throttled(self, broker_id: int, throttle_ms: int) -> None: ...


class ProduceConnection:
    """One ProduceStream to a broker, with a reader thread matching responses to requests in order."""

    def __init__(self, handler: ProduceResponseHandler, cluster: ClusterClient, broker_id: int, address: str, *,
                 max_in_flight: int, request_timeout_ms: int) -> None:
        self.handler = handler
        self.cluster = cluster
        self.broker_id = broker_id
        self.address = address
        self.request_timeout_ms = request_timeout_ms
        self.requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.inflight: deque[InFlight] = deque()
        self.slots = threading.Semaphore(max_in_flight)
        self.broken = False
        self.timed_out = False
        self.lock = threading.Lock()
        stub = cluster.reachable_stub(address)
        if stub is None:
            raise TidelogError(f"broker {broker_id} at {address} is not reachable", code=ErrorCode.NETWORK_EXCEPTION)
        self.call = stub.ProduceStreamRaw(self._iter_requests())
        self.reader = threading.Thread(target=self._read, name=f"tidelog-produce-{broker_id}", daemon=True)
        self.reader.start()

    def _iter_requests(self) -> Iterator[bytes]:
        while True:
            req = self.requests.get()
            if req is None:
                return
            yield req

    def send(self, req: bytes, correlation_id: int, batches: dict[TopicPartition, ProducerBatch], acks: int) -> bool:
        """Queue a serialised ProduceRequest; False if the stream is broken."""
        while not self.slots.acquire(timeout=0.1):
            self.check_timeout(time.monotonic())
            if self.broken:
                return False
        with self.lock:
            if self.broken:
                self.slots.release()
                return False
            self.inflight.append(InFlight(correlation_id, batches, acks, time.monotonic()))
        self.requests.put(req)
        return True

    def check_timeout(self, now: float) -> None:
        """Kafka's request.timeout.ms: when the oldest request has waited longer, drop the connection;
        its requests fail as REQUEST_TIMED_OUT and their batches are retried (or expire)."""
        with self.lock:
            late = bool(self.inflight) and now - self.inflight[0].sent_at > self.request_timeout_ms / 1000
            if late and not self.broken and not self.timed_out:
                self.timed_out = True
            else:
                late = False
        if late:
            log.warning("produce request to broker %s got no response within %s ms; reconnecting",
                        self.broker_id, self.request_timeout_ms)
            self.cancel()

    def _read(self) -> None:
        handler = self.handler
        try:
            for resp in self.call:
                with self.lock:
                    entry = self.inflight.popleft()
                if resp.throttle_time_ms > 0:  # over a quota: send this broker nothing for that long
                    handler.throttled(self.broker_id, resp.throttle_time_ms)
                self.slots.release()
                handler.on_response(entry, resp)
        except grpc.RpcError as exc:
            forget_traceback(exc)
            if exc.code() != grpc.StatusCode.CANCELLED or not handler.closing:
                log.debug("produce stream to broker %s failed: %s", self.broker_id, exc.code())
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                self.cluster.forget(self.address)
        finally:
            with self.lock:
                self.broken = True
                pending = list(self.inflight)
                self.inflight.clear()
            error = (TidelogError(f"no response within {self.request_timeout_ms} ms",
                                  code=ErrorCode.REQUEST_TIMED_OUT) if self.timed_out
                     else TidelogError("connection lost", code=ErrorCode.NETWORK_EXCEPTION))
            for entry in pending:
                self.slots.release()
                handler.on_failure(entry, error)

    def close(self) -> None:
        self.requests.put(None)

    def cancel(self) -> None:
        self.call.cancel()
