"""Fetch (API key 1) on the Kafka door, with fetch sessions (KIP-227) and topic ids (v13+).

The read is the request layer's (``services/broker/api/fetch.py``); the response carries the segment
bytes as they lie on disk (the codec writes them as a separate chunk, never re-encoded).

Sessions are the broker's, as Kafka's ``FetchSessionCache``: a request with session epoch 0 opens one
(its partitions are the session's), later requests at the next epoch name only the partitions whose
fetch position changed and those ``forgotten``; the response names only partitions with records, an
error, or a new high watermark / log start offset. Epoch -1 is a sessionless full fetch. The session
rules are the follower sessions' (``services/broker/fetch_sessions.py``). At most
``max.incremental.fetch.session.cache.slots`` (1000) sessions are kept; the least recently used goes.

Fetches from the Kafka door are consumer fetches: a ``replica_id`` >= 0 is not believed (replication
runs over the brokers' own gRPC door), so a Kafka client can neither read past the high watermark nor
move it. ACLs are the request layer's: READ on each topic, else ``TOPIC_AUTHORIZATION_FAILED`` for its
partitions.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any

from services.broker.api import fetch as fetch_api
from services.broker.fetch_sessions import FINAL_EPOCH, LeaderSession, resolve_session
from services.broker.kafka.apis import Connection, KafkaApis, Reply
from services.broker.pipeline import RequestContext
from services.broker.replica_results import FetchPartitionResult, FetchSpec
from shared.errors import ErrorCode
from shared.kafka.messages import RequestFrame
from shared.types import TopicPartition

API_KEY = 1
VERSIONS = (4, 15)
SESSION_SLOTS = 1000
DEFAULT_PARTITION_MAX_BYTES = 1024 * 1024


class FetchSessions:
    """The broker's consumer fetch sessions, least recently used first."""

    def __init__(self, slots: int = SESSION_SLOTS) -> None:
        self.slots = slots
        self.sessions: OrderedDict[int, LeaderSession] = OrderedDict()
        self._ids = itertools.count(1)

    def resolve(self, session_id: int, epoch: int) -> tuple[LeaderSession | None, ErrorCode]:
        current = self.sessions.get(session_id) if session_id else None
        session, err = resolve_session(current, -1, session_id, epoch, lambda: next(self._ids) & 0x7FFFFFFF or 1)
        if session is not None:
            if session is not current:
                if current is not None:
                    self.sessions.pop(current.session_id, None)
                self.sessions[session.session_id] = session
                while len(self.sessions) > self.slots:
                    self.sessions.popitem(last=False)
            self.sessions.move_to_end(session.session_id)
        return session, err

    def close(self, session_id: int) -> None:
        self.sessions.pop(session_id, None)


async def handle(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    body = req.body
    version = req.api.version
    by_id = version >= 13
    ids, names = apis.topic_ids() if by_id else ({}, {})
    sessions: FetchSessions = apis.fetch_sessions
    session_id = int(getattr(body, "session_id", 0))
    epoch = int(getattr(body, "session_epoch", FINAL_EPOCH))

    unknown: list[tuple[Any, int]] = []  # (topic id, partition) not known here: UNKNOWN_TOPIC_ID
    requested: list[tuple[TopicPartition, int, int, int]] = []  # (tp, offset, leader epoch, max bytes)
    for t in body.topics:
        name = ids.get(t.topic_id) if by_id else t.topic
        for p in t.partitions:
            if name is None:
                unknown.append((t.topic_id, int(p.partition)))
                continue
            requested.append((TopicPartition(name, int(p.partition)), int(p.fetch_offset),
                              int(getattr(p, "current_leader_epoch", -1)),
                              int(p.partition_max_bytes) or DEFAULT_PARTITION_MAX_BYTES))
    forgotten = []
    for t in getattr(body, "forgotten_topics_data", ()):
        name = ids.get(t.topic_id) if by_id else t.topic
        if name is not None:
            forgotten.extend(TopicPartition(name, int(p)) for p in t.partitions)

    session: LeaderSession | None = None
    if epoch != FINAL_EPOCH:
        session, err = sessions.resolve(session_id, epoch)
        if session is None:
            return {"error_code": int(err), "session_id": 0, "responses": []}, 0
        if epoch == 0:
            session.partitions.clear()
        session.apply(requested, forgotten)
        specs = [FetchSpec(tp, sp.fetch_offset, sp.max_bytes, sp.leader_epoch) for tp, sp in session.partitions.items()]
    else:
        if session_id:
            sessions.close(session_id)  # epoch -1 closes the session it names
        specs = [FetchSpec(tp, off, mb, ep) for tp, off, ep, mb in requested]

    read_committed = int(getattr(body, "isolation_level", 0)) == 1
    call = fetch_api.FetchCall(-1, int(body.max_wait.total_seconds() * 1000), int(body.min_bytes),
                               int(getattr(body, "max_bytes", 0)), specs, 1 if read_committed else 0)
    results, throttle_ms = await fetch_api.fetch(apis.broker, ctx, call)
    if results is None:  # over quota: no data, at once
        return {"error_code": 0, "session_id": session.session_id if session else 0, "responses": []}, throttle_ms
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, r in results.items():
        if session is not None and epoch != 0:
            if not session.needs_answer(tp, r.error, len(r.records), r.high_watermark, r.log_start_offset):
                continue
        if session is not None:
            session.answered(tp, r.high_watermark, r.log_start_offset)
        by_topic.setdefault(tp.topic, []).append(_partition(tp.partition, r, read_committed))
    if session is not None:
        session.completed()
    responses = [{"topic": t, "topic_id": names.get(t), "partitions": parts} for t, parts in by_topic.items()]
    for topic_id, partition in unknown:
        responses.append({"topic": "", "topic_id": topic_id, "partitions": [
            {"partition_index": partition, "error_code": int(ErrorCode.UNKNOWN_TOPIC_ID), "high_watermark": -1,
             "last_stable_offset": -1, "log_start_offset": -1, "preferred_read_replica": -1, "records": b""}]})
    return {"error_code": 0, "session_id": session.session_id if session else 0, "responses": responses}, throttle_ms


def _partition(partition: int, r: FetchPartitionResult, read_committed: bool) -> dict[str, Any]:
    aborted = ([{"producer_id": pid, "first_offset": first} for pid, first in r.aborted or ()]
               if read_committed else None)
    return {"partition_index": partition, "error_code": int(r.error), "high_watermark": r.high_watermark,
            "last_stable_offset": r.last_stable_offset, "log_start_offset": r.log_start_offset,
            "aborted_transactions": aborted, "preferred_read_replica": -1, "records": r.records}
