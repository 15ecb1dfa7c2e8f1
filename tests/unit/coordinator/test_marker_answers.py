"""Component test: ``MarkerSender`` against a broker servicer on an in-process gRPC server (port 0). A broker
answering UNKNOWN_TOPIC_OR_PARTITION for a marker does not host the partition *now* (a restarted broker not
yet given it): the marker is retried against the leader looked up again, never dropped, because a dropped
abort marker lets the producer's next commit marker commit the aborted records (seen in CI under a leader
kill). Only a partition etcd has no record of is gone."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from services.coordinator.txn.decisions import MarkerPlan
from services.coordinator.txn_service import LEADER_MOVED, MARKER_DONE, NO_PARTITION, MarkerSender
from shared.errors import ErrorCode
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.types import TopicPartition

TP = TopicPartition("orders", 0)
PLAN = MarkerPlan("tx", producer_id=7, producer_epoch=3, commit=False, partitions=frozenset({TP}))


class _Broker(pb_grpc.BrokerServicer):
    def __init__(self, code: ErrorCode) -> None:
        self.code = code

    async def WriteTxnMarkers(self, request: pb.WriteTxnMarkersRequest, context: Any) -> pb.WriteTxnMarkersResponse:
        resp = pb.WriteTxnMarkersResponse()
        for m in request.markers:
            out = resp.markers.add(producer_id=m.producer_id)
            for t in m.topics:
                topic = out.topics.add(name=t.name)
                for p in t.partitions:
                    topic.partitions.add(partition=p, error_code=int(self.code))
        return resp


class _Sender(MarkerSender):
    """Leaders from a dict instead of etcd; counts the lookups that were asked to refresh."""

    def __init__(self, leader: int, address: str) -> None:
        super().__init__(store=None, brokers=lambda: {1: address})  # type: ignore[arg-type]
        self.leader = leader
        self.refreshed = 0

    async def leader_of(self, tp: TopicPartition, refresh: bool = False) -> int:
        self.refreshed += refresh
        return self.leader


def _round(code: ErrorCode, leader: int = 1, refresh: frozenset[TopicPartition] = frozenset()) -> tuple[ErrorCode, int]:
    async def scenario() -> tuple[ErrorCode, int]:
        server = grpc.aio.server()
        pb_grpc.add_BrokerServicer_to_server(_Broker(code), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        sender = _Sender(leader, f"127.0.0.1:{port}")
        try:
            answers = await sender.send(PLAN, {TP}, coordinator_epoch=1, refresh=set(refresh))
            return answers[TP], sender.refreshed
        finally:
            await sender.close()
            await server.stop(None)

    return asyncio.run(scenario())


def test_a_broker_that_does_not_host_the_partition_is_retried_after_a_new_leader_lookup() -> None:
    code, _ = _round(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert code not in MARKER_DONE and code in LEADER_MOVED  # finish() looks the leader up again and retries
    _, refreshed = _round(ErrorCode.NONE, refresh=frozenset({TP}))
    assert refreshed == 1


def test_a_partition_etcd_has_no_record_of_is_done_and_other_answers_keep_their_meaning() -> None:
    code, _ = _round(ErrorCode.NONE, leader=NO_PARTITION)
    assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and code in MARKER_DONE  # deleted: dropped, as Kafka
    assert _round(ErrorCode.NONE)[0] == ErrorCode.NONE
    assert _round(ErrorCode.INVALID_PRODUCER_EPOCH)[0] in MARKER_DONE
    assert _round(ErrorCode.NOT_LEADER_OR_FOLLOWER)[0] in LEADER_MOVED
