"""Real Kafka clients in consumer groups through the brokers' Kafka listener, on one cluster for the
module (real etcd, a controller, two brokers, one group coordinator; short group timeouts):

- confluent-kafka (librdkafka) classic groups with the range, roundrobin and cooperative-sticky
  assignors, and KIP-848 groups (group.protocol=consumer): two members split a 4-partition topic,
  consume every record once between them, commit; a new member resumes from the commits;
- kafka-python 3 and aiokafka classic groups: the same;
- static membership (group.instance.id): a restarted member keeps its partitions and the others see no
  rebalance; a second live instance fences the first (FENCED_INSTANCE_ID);
- kill -9 of one of two member processes: the survivor takes every partition and consumes what the
  dead member had consumed without committing (at-least-once);
- the group as admin clients, `tidelog groups` and REST show it; protocol kinds cannot mix in a
  non-empty group (INCONSISTENT_GROUP_PROTOCOL) but an empty group changes kind with its offsets;
- regex subscriptions (librdkafka matches them against an all-topics Metadata request in classic
  groups, the coordinator does in KIP-848 groups).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka import ConsumerGroupState as CkState
from confluent_kafka import ConsumerGroupTopicPartitions as CkGroupOffsets
from confluent_kafka import ConsumerGroupType as CkType
from confluent_kafka.admin import AdminClient

from shared.cli.main import cli
from shared.client import Admin
from tests.conftest import REPO, Cluster, kill_cluster, start_cluster, wait_for
from tests.integration.kafka_util import grpc_bootstrap, kafka_bootstrap, log_records, wait_partitions_led

GROUP_ENV = {
    "TIDELOG_GROUP_INITIAL_REBALANCE_DELAY_MS": "300",
    "TIDELOG_GROUP_MIN_SESSION_TIMEOUT_MS": "1000",
    "TIDELOG_GROUP_CONSUMER_SESSION_TIMEOUT_MS": "3000",
    "TIDELOG_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "250",
    "TIDELOG_CONTROLLED_SHUTDOWN_ENABLE": "false",
}
PARTITIONS = 4
CLASSIC_SESSION_MS = 6000  # what the classic members ask for (the coordinator allows 1 s and up here)
FENCED_INSTANCE_ID_TEXT = "Static consumer fenced by other consumer with same group.instance.id"  # librdkafka's text of 82


@dataclass
class Kafka:
    cluster: Cluster
    bootstrap: str  # Kafka listeners
    admin: AdminClient  # confluent-kafka's
    tidelog: Admin  # Tidelog's own (gRPC), to create topics

    def new_topic(self, prefix: str, partitions: int = PARTITIONS) -> str:
        topic = unique(prefix)
        self.tidelog.create_topic(topic, partitions=partitions)
        wait_partitions_led(self.bootstrap, topic, partitions)
        return topic


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kafka]:
    c = start_cluster(str(tmp_path_factory.mktemp("kafka-groups")), controllers=1, brokers=2, coordinators=1,
                      cleaners=0, quotas=0, extra_env=GROUP_ENV)
    tidelog = Admin(grpc_bootstrap(c))
    try:
        bootstrap = kafka_bootstrap(c)
        yield Kafka(c, bootstrap, AdminClient({"bootstrap.servers": bootstrap}), tidelog)
    finally:
        tidelog.close()
        kill_cluster(c)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(k: Kafka, topic: str, n: int, start: int = 0) -> None:
    """Values str(i) for i in [start, start + n), round-robin over the partitions by i."""
    producer = Producer({"bootstrap.servers": k.bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        producer.produce(topic, value=str(i).encode(), key=str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0, "records left undelivered"


def values(start: int, n: int) -> set[str]:
    return {str(i) for i in range(start, start + n)}


# -- confluent-kafka members polled from the test's thread ---------------------------------------------------


@dataclass
class Member:
    """A confluent-kafka consumer subscribed in a group; ``pump`` polls it from the test's thread."""

    name: str
    consumer: Any
    records: list[tuple[int, int, str]] = field(default_factory=list)  # (partition, offset, value)
    events: list[tuple[str, list[int]]] = field(default_factory=list)  # ("assign"|"revoke", partitions)
    errors: list[KafkaError] = field(default_factory=list)
    closed: bool = False

    def poll(self, timeout: float) -> None:
        msg = self.consumer.poll(timeout)
        if msg is None:
            return
        if msg.error() is not None:
            self.errors.append(msg.error())
            return
        self.records.append((msg.partition(), msg.offset(), msg.value().decode()))

    def assignment(self) -> list[int]:
        return sorted(tp.partition for tp in self.consumer.assignment())

    def values(self) -> list[str]:
        return [v for _, _, v in self.records]

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


def member(k: Kafka, group: str, topics: list[str], name: str, **conf: Any) -> Member:
    consumer = Consumer({"bootstrap.servers": k.bootstrap, "group.id": group, "client.id": name,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", **conf})
    m = Member(name, consumer)

    def on_assign(_: Any, tps: list[TopicPartition]) -> None:
        m.events.append(("assign", sorted(tp.partition for tp in tps)))

    def on_revoke(_: Any, tps: list[TopicPartition]) -> None:
        m.events.append(("revoke", sorted(tp.partition for tp in tps)))

    consumer.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke)
    return m


def fatal(m: Member) -> str:
    """The text of the fatal error librdkafka surfaced to ``m`` ("" if none)."""
    return next((e.str() for e in m.errors if e.code() == KafkaError._FATAL), "")


def classic_conf(**conf: Any) -> dict[str, Any]:
    return {"session.timeout.ms": CLASSIC_SESSION_MS, "heartbeat.interval.ms": 300, **conf}


def pump(members: list[Member], until: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll every open member in turn until ``until()`` is true (AssertionError after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        for m in members:
            if not m.closed:
                m.poll(0.05)
        done = until()
        if done:
            return done
        if time.monotonic() > deadline:
            state = {m.name: (m.assignment() if not m.closed else "closed", len(m.records), m.errors[-2:])
                     for m in members}
            raise AssertionError(f"timed out after {timeout}s waiting for {what}: {state}")


def settle(members: list[Member], seconds: float) -> None:
    """Keep polling for ``seconds`` (what a rebalance or a stray record would need to show)."""
    deadline = time.monotonic() + seconds
    pump(members, lambda: time.monotonic() > deadline, seconds + 5, f"{seconds}s")


def split(a: Member, b: Member) -> bool:
    """Both members hold partitions, and between them every partition exactly once."""
    pa, pb = a.assignment(), b.assignment()
    return bool(pa and pb) and sorted(pa + pb) == list(range(PARTITIONS))


def committed(k: Kafka, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets on ``topic`` (AdminClient's OffsetFetch)."""
    result = k.admin.list_consumer_group_offsets([CkGroupOffsets(group)])[group].result()
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.topic == topic}


@dataclass
class Split:
    group: str
    topic: str
    held: list[list[int]]  # each first member's partitions while consuming
    described: Any  # AdminClient's description of the group while they consume
    events: list[list[tuple[str, list[int]]]]  # each first member's rebalance callbacks, close included


def split_consume_commit_resume(k: Kafka, prefix: str, conf: dict[str, Any]) -> Split:
    """Two confluent members of a new group split a new topic, consume its 200 records once between them
    and commit; then a third member of the group resumes at the commits."""
    topic, group = k.new_topic(prefix), unique(f"{prefix}-g")
    a, b = member(k, group, [topic], "a", **conf), member(k, group, [topic], "b", **conf)
    try:
        pump([a, b], lambda: split(a, b), 30, "two members splitting the partitions")
        produce(k, topic, 200)
        pump([a, b], lambda: len(a.records) + len(b.records) >= 200, 30, "the 200 records")
        settle([a, b], 0.5)
        assert sorted(a.values() + b.values(), key=int) == sorted(values(0, 200), key=int)  # each once
        held = [a.assignment(), b.assignment()]
        described = k.admin.describe_consumer_groups([group])[group].result()
        for m in (a, b):
            assert {p for p, _, _ in m.records} == set(m.assignment()), m.name  # only its own partitions
            m.consumer.commit(asynchronous=False)
    finally:
        a.close()
        b.close()
    assert committed(k, group, topic) == dict.fromkeys(range(PARTITIONS), 50)

    produce(k, topic, 20, start=200)
    c = member(k, group, [topic], "c", **conf)
    try:
        pump([c], lambda: len(c.records) >= 20, 30, "the records after the commits")
        assert sorted(c.values(), key=int) == sorted(values(200, 20), key=int)
        assert {(p, o) for p, o, _ in c.records} == {(p, o) for p in range(PARTITIONS) for o in range(50, 55)}
        c.consumer.commit(asynchronous=False)
    finally:
        c.close()
    assert committed(k, group, topic) == dict.fromkeys(range(PARTITIONS), 55)
    return Split(group, topic, held, described, [a.events, b.events])


# -- 1, 2: confluent-kafka, classic with each assignor and KIP-848 --------------------------------------------

ASSIGNORS = {  # partition.assignment.strategy -> the two assignments expected (None: any 2 + 2 split)
    "range": [[0, 1], [2, 3]],
    "roundrobin": [[0, 2], [1, 3]],
    "cooperative-sticky": None,
}


@pytest.mark.parametrize("assignor", list(ASSIGNORS))
def test_confluent_classic_group_splits_consumes_once_commits_and_resumes(kafka: Kafka, assignor: str) -> None:
    run = split_consume_commit_resume(kafka, f"ck-{assignor}", classic_conf(
        **{"partition.assignment.strategy": assignor}))
    assert sorted(map(len, run.held)) == [2, 2]
    if ASSIGNORS[assignor] is not None:
        assert sorted(run.held) == ASSIGNORS[assignor]
    if assignor == "cooperative-sticky":  # incremental: a member never gives back a partition it keeps
        for held, events in zip(run.held, run.events, strict=True):
            assert not [ps for kind, ps in events[:-1] if kind == "revoke" and set(ps) & set(held)], events
    d = run.described
    assert (d.type, d.state, d.partition_assignor, len(d.members)) == (CkType.CLASSIC, CkState.STABLE, assignor, 2)
    assert kafka.admin.describe_consumer_groups([run.group])[run.group].result().state == CkState.EMPTY


def test_confluent_kip848_group_splits_consumes_once_commits_and_resumes(kafka: Kafka) -> None:
    run = split_consume_commit_resume(kafka, "ck-848", {"group.protocol": "consumer"})
    d = run.described
    assert (d.type, d.state, d.partition_assignor, len(d.members)) == (CkType.CONSUMER, CkState.STABLE, "uniform", 2)
    assert kafka.admin.describe_consumer_groups([run.group])[run.group].result().state == CkState.EMPTY


# -- 3, 4: kafka-python 3 and aiokafka ----------------------------------------------------------------------


class KafkaPythonMember(threading.Thread):
    """A kafka-python 3 KafkaConsumer polled by its own thread (the consumer is not thread-safe: only this
    thread touches it). Each member needs its own thread with long polls: kafka-python 3.0.12 drops a
    JoinGroup/SyncGroup round that completes between two polls and joins again (``join_group_async``
    makes a new join task when the previous one ``is_done``), and a leader joining again starts a new
    generation: two consumers polled in turn for 50 ms each rebalanced for 20 s in one trial."""

    def __init__(self, k: Kafka, topic: str, group: str, name: str) -> None:
        super().__init__(name=f"kafka-python-{name}", daemon=True)
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(topic, bootstrap_servers=k.bootstrap.split(","), group_id=group,
                                      client_id=name, enable_auto_commit=False, auto_offset_reset="earliest",
                                      session_timeout_ms=CLASSIC_SESSION_MS, heartbeat_interval_ms=300)
        self.records: list[tuple[int, int, str]] = []
        self.assigned: list[int] = []
        self.finish = threading.Event()  # commit what was consumed, then wait for ``leave`` and close
        self.committed = threading.Event()
        self.leave = threading.Event()
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            while not self.finish.is_set():
                for batch in self.consumer.poll(timeout_ms=500).values():
                    self.records += [(r.partition, r.offset, r.value.decode()) for r in batch]
                self.assigned = sorted(tp.partition for tp in self.consumer.assignment())
            self.consumer.commit()
        except BaseException as exc:  # reported by stop()
            self.error = exc
        finally:
            self.committed.set()
            self.leave.wait(30)
            self.consumer.close()

    def stop(self) -> None:
        stop_members(self)


def stop_members(*members: KafkaPythonMember) -> None:
    """Every member commits, then every member leaves. A member that left starts a rebalance: once the
    others' heartbeats learn of it, kafka-python fails their commits itself (RebalanceInProgressError), as it
    does against Kafka (a CI run stopped one member while the other had still to commit)."""
    for m in members:
        m.finish.set()
    for m in members:
        m.committed.wait(30)
    for m in members:
        m.leave.set()
    for m in members:
        m.join(30)
        assert not m.is_alive() and m.error is None, m.error


def test_kafka_python_group_splits_consumes_commits_and_resumes(kafka: Kafka) -> None:
    topic, group = kafka.new_topic("kp"), unique("kp-g")
    a, b = KafkaPythonMember(kafka, topic, group, "a"), KafkaPythonMember(kafka, topic, group, "b")
    try:
        wait_for(lambda: a.assigned and b.assigned and sorted(a.assigned + b.assigned) == list(range(PARTITIONS)),
                 30, what="two kafka-python members splitting the partitions")
        produce(kafka, topic, 100)
        wait_for(lambda: len(a.records) + len(b.records) >= 100, 30, what="100 records")
        assert sorted(v for _, _, v in a.records + b.records) == sorted(values(0, 100))
        for m in (a, b):
            assert {p for p, _, _ in m.records} == set(m.assigned)
    finally:
        stop_members(a, b)
    assert committed(kafka, group, topic) == dict.fromkeys(range(PARTITIONS), 25)

    produce(kafka, topic, 8, start=100)
    c = KafkaPythonMember(kafka, topic, group, "c")
    try:
        wait_for(lambda: len(c.records) >= 8, 30, what="the records after the commits")
        assert sorted(c.records) == sorted((i % PARTITIONS, 25 + (i - 100) // PARTITIONS, str(i))
                                           for i in range(100, 108))
    finally:
        c.stop()
    assert committed(kafka, group, topic) == dict.fromkeys(range(PARTITIONS), 27)


def test_aiokafka_group_splits_consumes_commits_and_resumes(kafka: Kafka) -> None:
    from aiokafka import AIOKafkaConsumer

    topic, group = kafka.new_topic("ak"), unique("ak-g")

    def consumer(name: str) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(topic, bootstrap_servers=kafka.bootstrap, group_id=group, client_id=name,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                session_timeout_ms=CLASSIC_SESSION_MS, heartbeat_interval_ms=300)

    async def consume(members: list[AIOKafkaConsumer], n: int) -> list[list[tuple[int, int, str]]]:
        got: list[list[tuple[int, int, str]]] = [[] for _ in members]
        deadline = time.monotonic() + 30
        while sum(map(len, got)) < n:
            assert time.monotonic() < deadline, f"aiokafka read {sum(map(len, got))} of {n} records"
            for i, c in enumerate(members):
                for records in (await c.getmany(timeout_ms=50)).values():
                    got[i] += [(r.partition, r.offset, r.value.decode()) for r in records]
        return got

    async def scenario() -> None:
        a, b = consumer("a"), consumer("b")
        await a.start()
        await b.start()
        try:
            deadline = time.monotonic() + 30
            while not (a.assignment() and b.assignment()
                       and len(a.assignment()) + len(b.assignment()) == PARTITIONS):
                assert time.monotonic() < deadline, "aiokafka members never split the partitions"
                await asyncio.gather(a.getmany(timeout_ms=50), b.getmany(timeout_ms=50))
            produce(kafka, topic, 100)
            got_a, got_b = await consume([a, b], 100)
            assert sorted(v for _, _, v in got_a + got_b) == sorted(values(0, 100))
            assert {p for p, _, _ in got_a} == {tp.partition for tp in a.assignment()}
            await a.commit()
            await b.commit()
        finally:
            await a.stop()
            await b.stop()
        assert committed(kafka, group, topic) == dict.fromkeys(range(PARTITIONS), 25)
        produce(kafka, topic, 8, start=100)
        c = consumer("c")
        await c.start()
        try:
            (resumed,) = await consume([c], 8)
            assert sorted(o for _, o, _ in resumed) == [25, 25, 25, 25, 26, 26, 26, 26]
            assert sorted(v for _, _, v in resumed) == sorted(values(100, 8))
        finally:
            await c.stop()

    asyncio.run(scenario())


# -- 5: static membership -----------------------------------------------------------------------------------


def group_rest(k: Kafka, group: str) -> dict[str, Any]:
    return httpx.get(f"{k.cluster.rest}/v1/groups/{group}", timeout=10).json()


def test_static_member_restart_keeps_partitions_and_a_second_live_instance_is_fenced(kafka: Kafka) -> None:
    topic, group = kafka.new_topic("static"), unique("static-g")
    conf = classic_conf(**{"partition.assignment.strategy": "range"})
    a = member(kafka, group, [topic], "a", **{"group.instance.id": "inst-a"}, **conf)
    b = member(kafka, group, [topic], "b", **{"group.instance.id": "inst-b"}, **conf)
    members = [a, b]
    try:
        pump([a, b], lambda: split(a, b), 30, "two static members splitting the partitions")
        before = group_rest(kafka, group)
        assert sorted(m["instance_id"] for m in before["members"]) == ["inst-a", "inst-b"]
        held_a, held_b, b_events = a.assignment(), b.assignment(), list(b.events)

        # a restarts (librdkafka sends no LeaveGroup for a static member) well within its session timeout.
        a.close()
        a2 = member(kafka, group, [topic], "a2", **{"group.instance.id": "inst-a"}, **conf)
        members.append(a2)
        pump([a2, b], lambda: a2.assignment(), 30, "the restarted static member's partitions")
        settle([a2, b], 1.0)  # a rebalance, if any, would reach b within a few heartbeats
        assert a2.assignment() == held_a and b.assignment() == held_b
        assert b.events == b_events, "b saw a rebalance when a static member restarted"
        after = group_rest(kafka, group)
        assert after["group_epoch"] == before["group_epoch"] and after["state"] == "Stable"
        ids = {m["instance_id"]: m["member_id"] for m in after["members"]}
        assert ids["inst-a"] != {m["instance_id"]: m["member_id"] for m in before["members"]}["inst-a"]

        # A second live instance of inst-b takes b's place: b is fenced, a2 sees no rebalance.
        a2_events = list(a2.events)
        b2 = member(kafka, group, [topic], "b2", **{"group.instance.id": "inst-b"}, **conf)
        members.append(b2)
        pump([a2, b, b2], lambda: fatal(b) and b2.assignment(), 30, "b fenced and b2 holding b's partitions")
        assert FENCED_INSTANCE_ID_TEXT in fatal(b), b.errors
        assert b2.assignment() == held_b and a2.assignment() == held_a and a2.events == a2_events
        with pytest.raises(KafkaException):
            b.consumer.commit(asynchronous=False)
    finally:
        for m in members:
            m.close()


# -- 6: a member killed with SIGKILL ------------------------------------------------------------------------


class MemberProcess:
    """``tests/integration/kafka_group_member.py`` in a process; its JSON-lines output in a file."""

    def __init__(self, k: Kafka, topic: str, group: str, name: str, out_dir: str, protocol: str,
                 commit_limit: int) -> None:
        self.out_path = os.path.join(out_dir, f"{name}.jsonl")
        with open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.kafka_group_member", k.bootstrap, topic, group,
                 "--protocol", protocol, "--commit-limit", str(commit_limit), "--client-id", name,
                 "--session-timeout-ms", "3000"], cwd=REPO, stdout=out, stderr=subprocess.DEVNULL)

    def events(self, kind: str) -> list[dict[str, Any]]:
        with open(self.out_path) as f:
            return [e for line in f if line.startswith("{") and line.endswith("\n")
                    for e in [json.loads(line)] if e["event"] == kind]

    def assignment(self) -> list[int]:
        assigned = self.events("assigned")
        return assigned[-1]["partitions"] if assigned else []

    def committed(self) -> dict[int, int]:
        return {e["partition"]: e["offset"] for e in self.events("committed")}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_survivor_takes_over_a_sigkilled_member_and_consumes_its_uncommitted_records(
        kafka: Kafka, tmp_path: Any, protocol: str) -> None:
    topic, group = kafka.new_topic(f"kill-{protocol}"), unique(f"kill-{protocol}-g")
    victim = MemberProcess(kafka, topic, group, "victim", str(tmp_path), protocol, commit_limit=10)
    survivor = MemberProcess(kafka, topic, group, "survivor", str(tmp_path), protocol, commit_limit=-1)
    procs = [victim, survivor]
    try:
        wait_for(lambda: victim.assignment() and survivor.assignment()
                 and sorted(victim.assignment() + survivor.assignment()) == list(range(PARTITIONS)),
                 40, what="two member processes splitting the partitions")
        produce(kafka, topic, 200)

        def consumed() -> set[str]:
            return {e["value"] for p in procs for e in p.events("record")}

        wait_for(lambda: consumed() >= values(0, 200), 30, what="every record consumed by the two members")
        victim_parts, victim_committed = victim.assignment(), victim.committed()
        victim_read = {(e["partition"], e["offset"]) for e in victim.events("record")}
        uncommitted = {(p, o) for p, o in victim_read if o >= victim_committed.get(p, 0)}
        assert uncommitted and victim_committed, "the victim should hold consumed but uncommitted records"

        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        wait_for(lambda: survivor.assignment() == list(range(PARTITIONS)), 30,
                 what="the survivor holding every partition after the session timeout")
        takeover = {(p, o) for p, o in uncommitted}

        def survivor_read() -> set[tuple[int, int]]:
            return {(e["partition"], e["offset"]) for e in survivor.events("record")}

        wait_for(lambda: survivor_read() >= takeover, 30, what="the victim's uncommitted records re-consumed")
        for p in victim_parts:  # the survivor starts each taken partition exactly at the victim's commit
            offsets = sorted(o for q, o in survivor_read() if q == p)
            assert offsets == list(range(victim_committed.get(p, 0), 50)), (p, offsets[:5])
        wait_for(lambda: committed(kafka, group, topic) == dict.fromkeys(range(PARTITIONS), 50), 30,
                 what="the survivor's commits at the end of every partition")
        assert not survivor.events("error")
    finally:
        for p in procs:
            p.stop()


# -- 7: admin views ------------------------------------------------------------------------------------------


def test_admin_clients_cli_and_rest_show_a_kafka_clients_classic_group(kafka: Kafka) -> None:
    from kafka.admin import KafkaAdminClient

    topic, group = kafka.new_topic("views"), unique("views-g")
    produce(kafka, topic, 40)  # 10 per partition
    conf = classic_conf(**{"partition.assignment.strategy": "range"})
    a, b = member(kafka, group, [topic], "view-a", **conf), member(kafka, group, [topic], "view-b", **conf)
    kp = KafkaAdminClient(bootstrap_servers=kafka.bootstrap.split(","))
    try:
        pump([a, b], lambda: split(a, b), 30, "two members splitting the partitions")
        for m in (a, b):
            m.consumer.commit(offsets=[TopicPartition(topic, p, 4) for p in m.assignment()], asynchronous=False)

        # confluent-kafka's AdminClient
        listed = {g.group_id: g for g in kafka.admin.list_consumer_groups(request_timeout=10).result().valid}
        assert (listed[group].state, listed[group].type, listed[group].is_simple_consumer_group) == (
            CkState.STABLE, CkType.CLASSIC, False)
        stable = kafka.admin.list_consumer_groups(states={CkState.STABLE}, types={CkType.CLASSIC}).result().valid
        assert group in {g.group_id for g in stable}
        d = kafka.admin.describe_consumer_groups([group])[group].result()
        assert (d.state, d.type, d.partition_assignor, d.is_simple_consumer_group) == (
            CkState.STABLE, CkType.CLASSIC, "range", False)
        assert sorted((m.client_id, m.host, sorted(tp.partition for tp in m.assignment.topic_partitions))
                      for m in d.members) == [("view-a", "/127.0.0.1", a.assignment()),
                                              ("view-b", "/127.0.0.1", b.assignment())]
        assert committed(kafka, group, topic) == dict.fromkeys(range(PARTITIONS), 4)
        # Admin commits (generation -1, no member) are refused while the group has members (Kafka's rule).
        altered = kafka.admin.alter_consumer_group_offsets([CkGroupOffsets(group, [TopicPartition(topic, 0, 1)])])
        assert [tp.error.code() for tp in altered[group].result().topic_partitions] == [KafkaError.UNKNOWN_MEMBER_ID]
        with pytest.raises(KafkaException) as refused:
            kafka.admin.delete_consumer_groups([group])[group].result()
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP

        # kafka-python 3's KafkaAdminClient (list_groups / describe_groups / list_group_offsets in 3.0)
        kp_listed = {g["group_id"]: g for g in kp.list_groups()}
        assert (kp_listed[group]["group_state"], kp_listed[group]["group_type"]) == ("Stable", "Classic")
        kp_d = kp.describe_groups([group])[group]
        assert (kp_d["group_state"], kp_d["protocol_type"], kp_d["protocol_data"]) == ("Stable", "consumer", "range")
        assert sorted(m["client_id"] for m in kp_d["members"]) == ["view-a", "view-b"]
        assert all(m["member_metadata"]["topics"] == [topic] for m in kp_d["members"])
        assert sorted(p for m in kp_d["members"] for t in m["member_assignment"]["assigned_partitions"]
                      for p in t["partitions"]) == list(range(PARTITIONS))
        assert {tp.partition: om.offset for tp, om in kp.list_group_offsets(group)[group].items()} == dict.fromkeys(
            range(PARTITIONS), 4)

        # REST and the CLI: members, committed offsets, log end offsets, lag.
        rest = group_rest(kafka, group)
        assert (rest["group_type"], rest["state"], rest["protocol_type"], rest["assignor"]) == (
            "classic", "Stable", "consumer", "range")
        assert sorted(m["client_id"] for m in rest["members"]) == ["view-a", "view-b"]
        member_of = {m["client_id"]: m["member_id"] for m in rest["members"]}
        rows = {r["partition"]: r for r in rest["partitions"]}
        assert {p: (r["committed_offset"], r["log_end_offset"], r["lag"]) for p, r in rows.items()} == dict.fromkeys(
            range(PARTITIONS), (4, 10, 6))
        assert {p: r["member_id"] for p, r in rows.items()} == {
            p: member_of[m.name] for m in (a, b) for p in m.assignment()}
        where = ["--rest", kafka.cluster.rest, "--bootstrap-server", grpc_bootstrap(kafka.cluster)]
        out = CliRunner().invoke(cli, ["groups", "list", "--json", *where])
        assert out.exit_code == 0, out.output
        assert {g["group_id"]: (g["group_type"], g["state"], g["members"]) for g in json.loads(out.output)}[
            group] == ("classic", "Stable", 2)
        out = CliRunner().invoke(cli, ["groups", "list", *where])
        assert [line.split()[:4] for line in out.output.splitlines() if line.split()[:1] == [group]] == [
            [group, "classic", "Stable", "2"]], out.output
        out = CliRunner().invoke(cli, ["groups", "describe", group, *where])
        assert out.exit_code == 0 and "Type: classic" in out.output and "Protocol: range" in out.output, out.output
        assert all(member_id in out.output for member_id in member_of.values())
        lag_rows = [line.split() for line in out.output.splitlines() if line.split()[:1] == [topic]]
        assert sorted((int(r[1]), r[2], r[3], r[4]) for r in lag_rows) == [
            (p, "4", "10", "6") for p in range(PARTITIONS)]
    finally:
        a.close()
        b.close()
        kp.close()

    # Empty: admin commits are taken, then the group is deleted with its offsets.
    wait_for(lambda: group_rest(kafka, group)["state"] == "Empty", 10, what="the group empty")
    altered = kafka.admin.alter_consumer_group_offsets([CkGroupOffsets(group, [TopicPartition(topic, 0, 1)])])
    assert [tp.error for tp in altered[group].result().topic_partitions] == [None]
    assert committed(kafka, group, topic) == {0: 1, 1: 4, 2: 4, 3: 4}
    assert kafka.admin.delete_consumer_groups([group])[group].result() is None
    assert kafka.admin.describe_consumer_groups([group])[group].result().state == CkState.DEAD
    assert committed(kafka, group, topic) == {}


# -- 8: protocol kinds do not mix in a non-empty group --------------------------------------------------------


def test_classic_and_kip848_members_do_not_mix_until_the_group_is_empty(kafka: Kafka) -> None:
    topic, group = kafka.new_topic("mixed"), unique("mixed-g")
    produce(kafka, topic, 40)
    classic = member(kafka, group, [topic], "classic", **classic_conf())
    members = [classic]
    try:
        pump([classic], lambda: len(classic.records) == 40, 30, "the classic member reading everything")
        classic.consumer.commit(asynchronous=False)

        # A KIP-848 member's ConsumerGroupHeartbeat is refused; librdkafka makes that error fatal.
        new = member(kafka, group, [topic], "kip848", **{"group.protocol": "consumer"})
        members.append(new)
        pump([classic, new], lambda: fatal(new), 30, "the KIP-848 member refused")
        assert "Inconsistent group protocol" in fatal(new), new.errors
        assert new.assignment() == [] and classic.assignment() == list(range(PARTITIONS))
        assert kafka.admin.describe_consumer_groups([group])[group].result().type == CkType.CLASSIC
        new.close()

        # Empty, the group turns into a KIP-848 group, keeping the classic member's commits.
        classic.close()
        produce(kafka, topic, 8, start=40)
        kip848 = member(kafka, group, [topic], "kip848-2", **{"group.protocol": "consumer"})
        members.append(kip848)
        pump([kip848], lambda: len(kip848.records) >= 8, 30, "the KIP-848 member resuming the classic commits")
        assert sorted(o for _, o, _ in kip848.records) == [10, 10, 10, 10, 11, 11, 11, 11]
        kip848.consumer.commit(asynchronous=False)
        assert kafka.admin.describe_consumer_groups([group])[group].result().type == CkType.CONSUMER

        # Now a classic member's JoinGroup is refused (retriable for librdkafka: it keeps trying).
        late = member(kafka, group, [topic], "classic-2", **classic_conf())
        members.append(late)
        pump([kip848, late], lambda: late.errors, 30, "the classic member refused")
        assert {e.code() for e in late.errors} == {KafkaError.INCONSISTENT_GROUP_PROTOCOL}, late.errors
        assert late.assignment() == [] and kip848.assignment() == list(range(PARTITIONS))
        kip848.close()
        pump([late], lambda: late.assignment() == list(range(PARTITIONS)), 30, "the classic member joining")
    finally:
        for m in members:
            m.close()


# -- regex subscriptions ------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_regex_subscription(kafka: Kafka, protocol: str) -> None:
    """librdkafka resolves a classic group's regex from an all-topics Metadata request; a KIP-848 member
    sends the regex to the coordinator."""
    prefix = unique(f"rx{protocol}")
    topic = kafka.new_topic(prefix)
    produce(kafka, topic, 8)
    conf = classic_conf() if protocol == "classic" else {"group.protocol": "consumer"}
    m = member(kafka, unique("rx-g"), [f"^{prefix}.*"], "rx", **conf)
    broker_logs = [p.log_path for p in kafka.cluster.procs("broker")]
    marks = [os.path.getsize(path) for path in broker_logs]
    try:
        pump([m], lambda: len(m.records) >= 8, 15, "the records of the topic matching the regex")
    except AssertionError as exc:
        closed = [r for path, mark in zip(broker_logs, marks, strict=True) for r in log_records(path, mark)
                  if r.get("msg") == "closing Kafka connection: malformed request"]
        raise AssertionError(f"{exc}; the brokers closed connections: {[r.get('error') for r in closed][:2]}") \
            from None
    finally:
        m.close()
