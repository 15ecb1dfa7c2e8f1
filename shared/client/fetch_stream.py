"""A FetchStream call to one broker with several requests in flight (pipelining).

A unary fetch is a round trip: the broker idles while the client receives and
the client idles while the broker reads. On a stream the broker tracks where
its last response for each partition ended, so an *incremental* request
("continue") can be sent before the previous response has arrived; with a few
in flight the broker reads the next chunk while the last one is on the wire.
Responses arrive in request order; each carries the offset it was read from
(``fetch_offset``) and where it ended (``next_offset``), so a caller can check
it continues exactly where the previous one stopped.
"""

from __future__ import annotations

import queue
import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from shared.proto import tidelog_pb2 as pb
from shared.proto.fetch_wire import FetchResponseView
from shared.types import TopicPartition

if TYPE_CHECKING:
    from shared.client.cluster import BrokerClientStub

M = TypeVar("M")


def fetch_request(
    partitions: Iterable[tuple[TopicPartition, int]], *, max_wait_ms: int, min_bytes: int, max_bytes: int,
    partition_max_bytes: int, incremental: bool, client_id: str = "", isolation_level: int = 0,
) -> pb.FetchRequest:
    """A consumer's FetchRequest for ``(partition, fetch_offset)`` pairs (offsets unused when incremental)."""
    topics: dict[str, list[pb.FetchPartition]] = {}
    for tp, offset in partitions:
        topics.setdefault(tp.topic, []).append(pb.FetchPartition(
            partition=tp.partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes,
            current_leader_epoch=-1))
    return pb.FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                           client_id=client_id, incremental=incremental, isolation_level=isolation_level,
                           topics=[pb.FetchTopic(name=t, partitions=ps) for t, ps in topics.items()])


class PipelinedFetchStream(Generic[M]):
    """Send requests without waiting; ``receive()`` returns each response with the meta given to ``send``.

    Responses are ``FetchResponseView``s: each partition's records stay in the received bytes.
    Not thread-safe on its own: one thread sends (or sends under the caller's lock) and one receives.
    """

    pipelined = True

    def __init__(self, stub: BrokerClientStub, broker: int) -> None:
        self.broker = broker
        self._requests: queue.SimpleQueue[pb.FetchRequest | None] = queue.SimpleQueue()
        self._call: Any = stub.FetchStreamRaw(iter(self._requests.get, None))
        self._pending: deque[M] = deque()
        self.last_activity = time.monotonic()
        self.closed = False

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def send(self, request: pb.FetchRequest, meta: M) -> None:
        if not self._pending:
            self.last_activity = time.monotonic()  # the wait for a response starts now
        self._pending.append(meta)
        self._requests.put(request)

    def receive(self) -> tuple[FetchResponseView, M]:
        """The next response (blocking); raises ``grpc.RpcError`` or ``StopIteration`` when the stream ends."""
        call = self._call
        if call is None:
            raise StopIteration
        resp = next(call)
        self.last_activity = time.monotonic()
        return resp, self._pending.popleft()

    def close(self) -> None:
        """End the call and drop this stream's reference to it (see ``shared.client.grpc_calls``): it is
        freed here, or by the reader when its ``receive`` fails."""
        if not self.closed:
            self.closed = True
            self._requests.put(None)
            call, self._call = self._call, None
            call.cancel()
