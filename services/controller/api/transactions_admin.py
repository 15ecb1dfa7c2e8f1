"""Transaction administration for the REST API (``kafka-transactions.sh``'s Admin calls): asks the
transaction coordinator instances (found through the ``__transaction_state`` ownership keys in etcd, as
``GroupAdmin`` finds group coordinators) and the partition leaders (DescribeProducers, and the ABORT
marker of ``abort``, which Kafka's ``Admin.abortTransaction`` sends as WriteTxnMarkers to the leader)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from shared.errors import ErrorCode, TidelogError
from shared.metadata.keys import Keys
from shared.metadata.store import MetadataStore
from shared.metadata.types import PartitionState, TopicRecord
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.proto import transactions_pb2 as tpb
from shared.proto import transactions_pb2_grpc as tpb_grpc
from shared.security.transport import aio_channel
from shared.txn_topic import TRANSACTION_STATE_TOPIC, txn_partition_for
from shared.types import TopicPartition

RETRY = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE})
#: topics Kafka's Admin.listTopics leaves out by default (find-hanging without --topic)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", TRANSACTION_STATE_TOPIC})


class TxnAdmin:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.keys: Keys = store.keys

    # -- coordinators ---------------------------------------------------------------------------------

    async def _txn_partitions(self) -> int:
        topic = await self.store.get(self.keys.topic(TRANSACTION_STATE_TOPIC))
        return len(TopicRecord.from_json(topic[0]).assignment) if topic else 0

    async def _owner(self, transactional_id: str) -> tuple[str, str]:
        """(coordinator instance, address) owning the id's ``__transaction_state`` partition."""
        n = await self._txn_partitions()
        if not n:
            raise TidelogError(f"transactional id {transactional_id!r} does not exist (no {TRANSACTION_STATE_TOPIC} yet)",
                               code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        p = txn_partition_for(transactional_id, n)
        owner = await self.store.get(self.keys.txn_owner(p))
        if owner is None:
            raise TidelogError(f"no coordinator owns {TRANSACTION_STATE_TOPIC} partition {p}",
                               code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return str(owner[0].get("owner", "")), str(owner[0]["address"])

    async def _coordinators(self) -> dict[str, str]:
        """Coordinator instance -> address, of every live instance."""
        found = await self.store.get_prefix(self.keys.services_prefix("coordinator"))
        return {Keys.last_segment(k): str(v["address"]) for k, (v, _, _) in found.items() if "address" in v}

    async def describe(self, transactional_id: str, attempts: int = 20) -> dict[str, Any]:
        """DescribeTransactions at the id's coordinator (retried while ownership moves or loads)."""
        last: Any = None
        for _ in range(attempts):
            try:
                owner, address = await self._owner(transactional_id)
                async with aio_channel(address) as ch:
                    resp = await tpb_grpc.TransactionCoordinatorStub(ch).DescribeTransactions(
                        tpb.DescribeTransactionsRequest(transactional_ids=[transactional_id]), timeout=10)
            except grpc.aio.AioRpcError as exc:
                last = exc.details()
            except TidelogError as exc:
                if exc.code not in RETRY:
                    raise
                last = exc
            else:
                d = resp.transactions[0]
                if d.error_code == 0:
                    return described(d, owner)
                if d.error_code not in RETRY:
                    raise TidelogError(f"transactional id {transactional_id!r}: {ErrorCode(d.error_code).name}",
                                       code=ErrorCode(d.error_code))
                last = ErrorCode(d.error_code).name
            await asyncio.sleep(0.25)
        raise TidelogError(f"describe transaction {transactional_id!r}: {last}", code=ErrorCode.COORDINATOR_NOT_AVAILABLE)

    async def list_transactions(self, states: list[str], producer_ids: list[int], duration_ms: int,
                                attempts: int = 20) -> list[dict[str, Any]]:
        """ListTransactions at every coordinator instance (each lists the ids of the partitions it owns),
        each row with its coordinator; an instance still loading a partition is asked again."""
        rows: dict[str, dict[str, Any]] = {}
        for instance, address in sorted((await self._coordinators()).items()):
            for _ in range(attempts):
                try:
                    async with aio_channel(address) as ch:
                        resp = await tpb_grpc.TransactionCoordinatorStub(ch).ListTransactions(tpb.ListTransactionsRequest(
                            state_filters=states, producer_id_filters=producer_ids, duration_filter_ms=duration_ms),
                            timeout=5)
                except grpc.aio.AioRpcError:
                    break  # an instance that just went away owns nothing now
                if resp.error_code not in RETRY:
                    break
                await asyncio.sleep(0.25)
            else:
                raise TidelogError(f"coordinator {instance} is still loading its transactions",
                                   code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            if resp.error_code:
                raise TidelogError(f"coordinator {instance}: {ErrorCode(resp.error_code).name}", code=ErrorCode(resp.error_code))
            for t in resp.transactions:
                rows[t.transactional_id] = {"transactional_id": t.transactional_id, "coordinator": instance,
                                            "producer_id": t.producer_id, "state": t.transaction_state}
        return [rows[k] for k in sorted(rows)]

    # -- partitions -----------------------------------------------------------------------------------

    async def topic_partitions(self, topic: str | None, partition: int | None, broker: int | None) -> list[TopicPartition]:
        """The partitions to search (find-hanging): of ``topic`` (or every non-internal topic), only those
        with a replica on ``broker`` when given."""
        if topic is not None:
            rec = await self.store.get(self.keys.topic(topic))
            if rec is None:
                raise TidelogError(f"unknown topic {topic!r}", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            records = [TopicRecord.from_json(rec[0])]
        else:
            records = [TopicRecord.from_json(v) for v, _, _ in (await self.store.get_prefix(self.keys.topics_prefix())).values()]
            records = [r for r in records if r.name not in INTERNAL_TOPICS]
        out = []
        for r in sorted(records, key=lambda r: r.name):
            for p, replicas in sorted(r.assignment.items()):
                if partition is not None and p != partition:
                    continue
                if broker is None or broker in replicas:
                    out.append(TopicPartition(r.name, p))
        if topic is not None and partition is not None and not out and broker is None:
            raise TidelogError(f"unknown partition {topic}-{partition}", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return out

    async def _leaders(self, tps: list[TopicPartition]) -> dict[TopicPartition, str | None]:
        brokers = {int(v["id"]): str(v["address"]) for v, _, _ in (await self.store.get_prefix(self.keys.brokers_prefix())).values()}
        out: dict[TopicPartition, str | None] = {}
        for tp in tps:
            st = await self.store.get(self.keys.partition(tp.topic, tp.partition))
            out[tp] = brokers.get(PartitionState.from_json(st[0]).leader) if st else None
        return out

    async def describe_producers(self, tps: list[TopicPartition], attempts: int = 10) -> dict[TopicPartition, list[dict[str, Any]]]:
        """Broker.DescribeProducers at each partition's leader; a partition without a leader, or whose
        leader moved, is asked again, then fails with its error."""
        out: dict[TopicPartition, list[dict[str, Any]]] = {}
        todo = list(tps)
        last: dict[TopicPartition, str] = {}
        for _ in range(attempts):
            by_leader: dict[str, list[TopicPartition]] = {}
            for tp, address in (await self._leaders(todo)).items():
                if address is None:
                    last[tp] = "LEADER_NOT_AVAILABLE"
                else:
                    by_leader.setdefault(address, []).append(tp)
            retry: list[TopicPartition] = [tp for tp in todo if tp in last and last[tp] == "LEADER_NOT_AVAILABLE"]
            for address, group in by_leader.items():
                topics: dict[str, list[int]] = {}
                for tp in group:
                    topics.setdefault(tp.topic, []).append(tp.partition)
                try:
                    async with aio_channel(address) as ch:
                        resp = await pb_grpc.BrokerStub(ch).DescribeProducers(pb.DescribeProducersRequest(topics=[
                            pb.DescribeProducersTopic(name=t, partitions=ps) for t, ps in topics.items()]), timeout=10)
                except grpc.aio.AioRpcError as exc:
                    for tp in group:
                        last[tp] = exc.details() or "broker unreachable"
                    retry.extend(group)
                    continue
                for t in resp.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition)
                        if p.error_code == 0:
                            out[tp] = [producer_row(s) for s in p.active_producers]
                            last.pop(tp, None)
                        elif p.error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                            last[tp] = ErrorCode(p.error_code).name
                            retry.append(tp)
                        else:
                            raise TidelogError(f"describe producers of {tp}: {p.error_message}", code=ErrorCode(p.error_code))
            if not retry:
                return out
            todo = retry
            await asyncio.sleep(0.25)
        tp = todo[0]
        raise TidelogError(f"describe producers of {tp}: {last.get(tp)}", code=ErrorCode.LEADER_NOT_AVAILABLE)

    async def write_abort_marker(self, tp: TopicPartition, producer_id: int, producer_epoch: int,
                                 coordinator_epoch: int, attempts: int = 10) -> None:
        """An ABORT marker for the producer at the partition's leader (Broker.WriteTxnMarkers)."""
        last: Any = None
        for _ in range(attempts):
            address = (await self._leaders([tp]))[tp]
            if address is None:
                last = "no leader"
            else:
                try:
                    async with aio_channel(address) as ch:
                        resp = await pb_grpc.BrokerStub(ch).WriteTxnMarkers(pb.WriteTxnMarkersRequest(markers=[
                            pb.WritableTxnMarker(producer_id=producer_id, producer_epoch=producer_epoch, committed=False,
                                                 coordinator_epoch=coordinator_epoch, topics=[
                                                     pb.WritableTxnMarkerTopic(name=tp.topic, partitions=[tp.partition])])]),
                            timeout=40)
                except grpc.aio.AioRpcError as exc:
                    last = exc.details()
                else:
                    r = resp.markers[0].topics[0].partitions[0]
                    if r.error_code == 0:
                        return
                    if r.error_code not in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT):
                        raise TidelogError(r.error_message or ErrorCode(r.error_code).name, code=ErrorCode(r.error_code))
                    last = r.error_message or ErrorCode(r.error_code).name
            await asyncio.sleep(0.25)
        raise TidelogError(f"abort marker for producer {producer_id} on {tp}: {last}", code=ErrorCode.LEADER_NOT_AVAILABLE)


def described(d: tpb.DescribedTransaction, coordinator: str) -> dict[str, Any]:
    return {"transactional_id": d.transactional_id, "coordinator": coordinator, "producer_id": d.producer_id,
            "producer_epoch": d.producer_epoch, "state": d.state, "transaction_timeout_ms": d.transaction_timeout_ms,
            "transaction_start_time_ms": d.transaction_start_time_ms if d.transaction_start_time_ms >= 0 else None,
            "topic_partitions": [f"{t.name}-{p}" for t in d.topics for p in t.partitions]}


def producer_row(s: pb.ActiveProducer) -> dict[str, Any]:
    return {"producer_id": s.producer_id, "producer_epoch": s.producer_epoch, "last_sequence": s.last_sequence,
            "last_timestamp": s.last_timestamp, "coordinator_epoch": s.coordinator_epoch,
            "current_txn_start_offset": s.current_txn_start_offset}
