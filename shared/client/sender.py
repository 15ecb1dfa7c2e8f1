"""The producer's sender thread (Kafka's ``Sender``): drains ready batches from the accumulator, encodes
them (RecordBatch v2), groups them by partition leader and writes them on one ``ProduceConnection`` per
broker; handles the answers (from the connections' reader threads): acknowledge, retry or fail.

The producer id, epoch and sequence numbers come from the producer-state object passed in as ``state``
(``ProducerState``: ``IdempotenceState``, or ``transactions.TransactionManager`` for a transactional
producer, which gets its producer id from its transaction coordinator in ``init_transactions()``; the
sender then asks it which partitions may be drained, whether the transaction is doomed, and tells it
of every batch that failed for good). Whether and when a failed batch is tried again is ``RetryPolicy``'s decision.
Must not import the producer.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time

import grpc

from shared.client.accumulator import RecordAccumulator
from shared.client.client_metrics import ProducerStats
from shared.client.cluster import ClusterClient
from shared.client.idempotence import ProducerState
from shared.client.produce_connection import InFlight, ProduceConnection
from shared.client.producer_batch import ProducerBatch
from shared.client.retry_policy import RetryPolicy
from shared.errors import ErrorCode, TidelogError, error_for
from shared.proto import tidelog_pb2 as pb
from shared.proto.produce_wire import encode_produce_request
from shared.proto.wire import int_fields, text_field
from shared.records.compression import CompressionType
from shared.types import TopicPartition

log = logging.getLogger("shared.client.producer")  # every producer log line under one name, as before the split
#: InitProducerId answers no retry can change (the principal lacks the right): fatal, as in Kafka's producer.
_REFUSED_FOR_GOOD = frozenset({ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})


class Sender:
    """One producer's sender thread and its connections. ``on_response``, ``on_failure`` and ``throttled``
    are called by the connections' reader threads; everything else runs on the sender thread."""

    def __init__(self, *, cluster: ClusterClient, accumulator: RecordAccumulator, state: ProducerState,
                 retry: RetryPolicy, stats: ProducerStats, partition_counts: dict[str, int], acks: int,
                 idempotent: bool, compression: CompressionType, max_in_flight: int, max_request_size: int,
                 request_timeout_ms: int, client_id: str, transactional_id: str | None = None,
                 transaction_version: int = 2) -> None:
        self.cluster = cluster
        self.accumulator = accumulator
        self.state = state
        self.retry = retry
        self.stats = stats
        # The producer's partition count of each topic (read by send()), updated on every metadata refresh.
        # A dict, not a callback into the producer: no reference cycle keeps a closed producer alive.
        self._partition_counts = partition_counts
        self.acks = acks
        self.idempotent = idempotent
        self.compression = compression
        self.max_in_flight = max_in_flight
        self.max_request_size = max_request_size
        self.request_timeout_ms = request_timeout_ms
        self.client_id = client_id
        # A transactional producer's batches carry the transactional flag, and its produce requests the
        # transactional id and transactions version (KIP-890: the leader verifies or adds the partition).
        self.transactional = bool(transactional_id)
        self._request_suffix = (text_field(0x2A, transactional_id) + int_fields(((0x38, transaction_version),))
                                if transactional_id else b"")
        self._connections: dict[int, ProduceConnection] = {}
        self._correlation = itertools.count(1)
        self.closing = False
        self._need_refresh = threading.Event()
        self._retry_after: dict[TopicPartition, float] = {}
        self._throttled_until: dict[int, float] = {}  # broker -> end of its last throttle_time_ms (KIP-219)
        self.throttled_responses = 0  # responses that carried a throttle_time_ms (Kafka's produce-throttle-time)
        self.throttle_time_ms_max = 0
        self._thread = threading.Thread(target=self.run, name="tidelog-producer-sender", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Send what is left (the accumulator drains everything once closed), stop, and close every
        connection. The caller has flushed first."""
        self.closing = True
        self.accumulator.closed = True
        self.accumulator.wakeup.set()
        self._thread.join(timeout=5)
        for conn in list(self._connections.values()):
            conn.close()
        for conn in list(self._connections.values()):
            conn.reader.join(timeout=2)
            conn.cancel()
        # Free the calls now, not at interpreter exit (see shared.client.grpc_calls).
        self._connections.clear()

    # -- the sender thread ----------------------------------------------------------------------------------

    def run(self) -> None:
        acc = self.accumulator
        while True:
            if self._need_refresh.is_set():
                self._need_refresh.clear()
                try:
                    snap = self.cluster.refresh()
                    for t, parts in snap.topics.items():
                        self._partition_counts[t] = len(parts)
                except TidelogError as exc:
                    log.debug("metadata refresh failed: %s", exc)
                    time.sleep(self.retry.retry_backoff_s)
            for conn in list(self._connections.values()):
                conn.check_timeout(time.monotonic())
            if self.state.reset_needed:
                if not self._take_new_producer_id():  # let every request in flight resolve first, as Kafka does
                    self._expire_waiting()
                    acc.wakeup.wait(0.01)
                    acc.wakeup.clear()
                    continue
            if self.transactional:
                doomed = self.state.doomed()
                if doomed is not None and acc.has_unsent():  # the transaction cannot commit: send no more of it
                    self.abort_unsent(doomed)
            elif self.idempotent and not self.state.has_producer_id() and acc.has_unsent():
                if not self._init_producer_id():
                    self._expire_waiting()
                    time.sleep(self.retry.retry_backoff_s)
                    continue
            now = time.monotonic()
            muted = {tp for tp, t in list(self._retry_after.items()) if t > now}
            if self._throttled_until:
                muted |= self._throttled_partitions(now)
            held = out_of_turn = None
            if self.idempotent:  # at most max_in_flight batches per partition (Kafka's limit of 5)
                muted |= self.state.muted(self.max_in_flight)
                if self.transactional:  # V1: partitions not yet added to the transaction wait, asked as
                    self.state.before_drain()  # each is drained (one first sent to meanwhile waits too)
                    held = self.state.held
                out_of_turn = self.state.out_of_turn  # retries go one at a time, oldest first
            batches, expired, wait = acc.drain_ready(now, muted, self.retry.delivery_timeout_s, held, out_of_turn)
            if expired:
                self._fail_expired(expired)
            if batches:
                self._send_batches(batches)
                continue
            if acc.closed and not acc.has_unsent():
                return
            acc.wakeup.wait(wait)
            acc.wakeup.clear()

    def _expire_waiting(self) -> None:
        """Fail the batches that waited unsent past ``delivery_timeout_ms`` (Kafka's expired batches):
        while no broker can hand out a producer id, nothing else would ever complete them."""
        self._fail_expired(self.accumulator.expire(time.monotonic(), self.retry.delivery_timeout_s))

    def _fail_expired(self, batches: list[ProducerBatch]) -> None:
        for batch in batches:
            error = self.retry.waited_out_error(batch)
            if self.idempotent:
                self.state.completed(batch, unwritten=not batch.maybe_written)
                self.state.failed(batch, error)
            batch.result.complete(-1, -1, error)
            self.accumulator.done(batch)

    def abort_unsent(self, error: BaseException) -> None:
        """Fail every batch not yet sent with ``error`` (Kafka's abortUndrainedBatches: the transaction is
        aborted or cannot commit). Batches in flight complete as the brokers answer."""
        for batch in self.accumulator.expire(time.monotonic(), -1.0):
            if self.idempotent:
                self.state.completed(batch, unwritten=not batch.maybe_written)
            batch.result.complete(-1, -1, error)
            self.accumulator.done(batch)
        self.accumulator.wakeup.set()

    def throttled(self, broker_id: int, throttle_ms: int) -> None:
        """A response from ``broker_id`` asked for a pause of ``throttle_ms`` (a quota, KIP-219)."""
        self._throttled_until[broker_id] = time.monotonic() + throttle_ms / 1000
        self.throttled_responses += 1
        self.throttle_time_ms_max = max(self.throttle_time_ms_max, throttle_ms)

    def _throttled_partitions(self, now: float) -> set[TopicPartition]:
        """Partitions led by a broker whose last response asked for a pause (throttle_time_ms)."""
        brokers = {b for b, t in list(self._throttled_until.items()) if t > now}
        if not brokers:
            self._throttled_until.clear()
            return set()
        out = set()
        for tp in list(self.accumulator.batches):
            with contextlib.suppress(TidelogError):
                if self.cluster.leader_for(tp) in brokers:
                    out.add(tp)
        return out

    # -- producer id (the transaction manager's seam) -------------------------------------------------------

    def _take_new_producer_id(self) -> bool:
        """After a batch failed with an unknown outcome, its sequence numbers can neither be reused (it
        may be written) nor skipped (it may not be, and the broker accepts only the next number): every
        later batch of the partition would be refused. So, as Kafka's idempotent producer does, start
        over with a new producer id once nothing is in flight (see ``IdempotenceState.reset_producer_id``)."""
        old = self.state.producer_id
        if not self.state.reset_producer_id():
            return False
        log.warning("idempotent producer %s: a batch failed with an unknown outcome (it may or may not be written); "
                    "taking a new producer id", old)
        return True

    def _init_producer_id(self) -> bool:
        """Get a producer id for idempotent sends (any broker allocates one). A transactional producer
        will ask its transaction coordinator instead, with its transactional id."""
        try:
            snap = self.cluster.snapshot if self.cluster.snapshot.brokers else self.cluster.refresh()
            for address in list(snap.brokers.values()) + self.cluster.bootstrap:
                stub = self.cluster.reachable_stub(address)
                if stub is None:
                    continue
                try:
                    resp = stub.InitProducerId(pb.InitProducerIdRequest(), timeout=5)
                except grpc.RpcError:
                    continue
                if resp.error_code == 0:
                    self.state.set_producer_id(resp.producer_id, resp.producer_epoch)
                    return True
                if resp.error_code in _REFUSED_FOR_GOOD:  # as Kafka's producer: fatal, the sends fail at once
                    self.abort_unsent(error_for(resp.error_code, "InitProducerId refused: the principal may not "
                                                "write idempotently (IDEMPOTENT_WRITE on the cluster, or WRITE on "
                                                "a topic)"))
                    return False
        except TidelogError as exc:
            log.warning("InitProducerId failed: %s", exc)
        return False

    # -- sending ----------------------------------------------------------------------------------------------

    def _release(self, batch: ProducerBatch) -> None:
        if self.idempotent:
            self.state.released(batch.tp)
            self.accumulator.wakeup.set()

    def _expire_or_retry(self, batch: ProducerBatch, error: TidelogError, refused: bool = False,
                         sent: bool = True) -> None:
        """Retry ``batch`` or fail it (see ``RetryPolicy.record_failed_attempt`` for ``refused`` and ``sent``)."""
        self._release(batch)
        retry = self.retry
        retry.record_failed_attempt(batch, error, refused=refused, sent=sent)
        expired = retry.expired(batch, time.monotonic())
        if retry.may_retry(batch, error) and not expired and not self.closing:
            self._need_refresh.set()
            self._retry_after[batch.tp] = time.monotonic() + retry.retry_backoff_s
            self.accumulator.reenqueue(batch)
            return
        if expired:
            error = retry.expired_error(batch, error)
        if self.idempotent:
            # Every attempt was refused before the append (or never sent): give the numbers back.
            # Otherwise one attempt may be written, and the producer id must be replaced.
            self.state.completed(batch, unwritten=not batch.maybe_written)
            self.state.failed(batch, error)
            self.accumulator.wakeup.set()
        batch.result.complete(-1, -1, error)
        self.accumulator.done(batch)

    def _send_batches(self, batches: list[ProducerBatch]) -> None:
        by_broker: dict[int, list[ProducerBatch]] = {}
        for b in batches:
            try:
                leader = self.cluster.leader_for(b.tp)
                if leader < 0 or leader not in self.cluster.snapshot.brokers:
                    raise TidelogError(f"{b.tp} has no leader", code=ErrorCode.LEADER_NOT_AVAILABLE)
            except TidelogError as exc:
                self._expire_or_retry(b, exc, sent=False)
                continue
            by_broker.setdefault(leader, []).append(b)
        for broker_id, group in by_broker.items():
            request_batches: dict[TopicPartition, ProducerBatch] = {}
            payloads: dict[TopicPartition, tuple[bytes, bytes]] = {}
            size = 0
            for b in group:
                payload = self._encoded(b)
                payload_size = len(payload[0]) + len(payload[1])
                if self.idempotent:
                    self.state.sending(b.tp)
                if request_batches and (size + payload_size > self.max_request_size or b.tp in request_batches):
                    self._dispatch(broker_id, request_batches, payloads)
                    request_batches, payloads, size = {}, {}, 0
                request_batches[b.tp] = b
                payloads[b.tp] = payload
                size += payload_size
            if request_batches:
                self._dispatch(broker_id, request_batches, payloads)

    def _encoded(self, b: ProducerBatch) -> tuple[bytes, bytes]:
        """The batch's header and records, encoded on its first send and again after it was re-sequenced."""
        if not self.idempotent:
            if b.encoded is None:
                b.encoded = b.encode(self.compression)
            return b.encoded
        return self.state.encode(b, lambda pid, epoch, seq: b.encode(
            self.compression, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
            transactional=self.transactional))

    def _connection(self, broker_id: int) -> ProduceConnection:
        conn = self._connections.get(broker_id)
        address = self.cluster.snapshot.brokers[broker_id]
        if conn is None or conn.broken or conn.address != address:
            if conn is not None:
                conn.close()
            conn = self._connections[broker_id] = ProduceConnection(
                self, self.cluster, broker_id, address,
                max_in_flight=self.max_in_flight, request_timeout_ms=self.request_timeout_ms)
        return conn

    def _dispatch(self, broker_id: int, batches: dict[TopicPartition, ProducerBatch],
                  payloads: dict[TopicPartition, tuple[bytes, bytes]]) -> None:
        by_topic: dict[str, list[tuple[int, tuple[bytes, bytes]]]] = {}
        for tp in batches:
            by_topic.setdefault(tp.topic, []).append((tp.partition, payloads[tp]))
        correlation_id = next(self._correlation)
        req = encode_produce_request(acks=self.acks, timeout_ms=self.request_timeout_ms, client_id=self.client_id,
                                     correlation_id=correlation_id, topics=list(by_topic.items()))
        if self._request_suffix:  # transactional_id (5) and transaction_version (7): valid after field 6
            req += self._request_suffix
        try:
            sent = self._connection(broker_id).send(req, correlation_id, batches, self.acks)
        except (grpc.RpcError, KeyError, TidelogError) as exc:
            sent = False
            log.debug("cannot reach broker %s: %s", broker_id, exc)
        if sent:
            self.stats.sent(batches.values(), sum(len(h) + len(r) for h, r in payloads.values()))
        if not sent:
            err = TidelogError(f"broker {broker_id} unreachable", code=ErrorCode.NETWORK_EXCEPTION)
            for b in batches.values():
                self._expire_or_retry(b, err, sent=False)
            return
        if self.acks == 0:
            for b in batches.values():
                b.result.complete(-1)
                self.accumulator.done(b)

    # -- responses (the connections' reader threads) -------------------------------------------------------

    def on_response(self, entry: InFlight, resp: pb.ProduceResponse) -> None:
        if entry.acks == 0:
            return
        self.stats.answered(time.monotonic() - entry.sent_at)
        seen: set[TopicPartition] = set()
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition)
                batch = entry.batches.get(tp)
                if batch is None:
                    continue
                seen.add(tp)
                if p.error_code == 0:
                    self._release(batch)
                    self.state.acknowledged(batch)
                    batch.result.complete(p.base_offset, p.log_append_time_ms)
                    self.accumulator.done(batch)
                else:
                    self._expire_or_retry(batch, error_for(p.error_code, p.error_message), refused=True)
        for tp, batch in entry.batches.items():
            if tp not in seen:
                self._expire_or_retry(batch, TidelogError("no response for partition", code=ErrorCode.NETWORK_EXCEPTION))

    def on_failure(self, entry: InFlight, error: TidelogError) -> None:
        if entry.acks == 0:
            return
        for batch in entry.batches.values():
            self._expire_or_retry(batch, error)
