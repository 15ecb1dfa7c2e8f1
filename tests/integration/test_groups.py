"""Consumer groups on real processes (etcd, controller, brokers, coordinators): the "Done means"
scenario with `tidelog consume --group`, static members, and coordinator faults."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import grpc
import httpx
import pytest
from click.testing import CliRunner

from shared.cli.main import cli
from shared.client import Admin, Consumer, Producer, TopicPartition
from shared.client.cluster import ClusterClient
from shared.client.group_coordinator import GroupCoordinatorClient
from shared.errors import ErrorCode, TidelogError
from shared.proto import coordinator_pb2 as cpb
from shared.proto import coordinator_pb2_grpc as cpb_grpc
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from tests.conftest import REPO, wait_for

GROUP_ENV = {
    "TIDELOG_OFFSETS_TOPIC_NUM_PARTITIONS": "6",
    "TIDELOG_GROUP_CONSUMER_SESSION_TIMEOUT_MS": "3000",
    "TIDELOG_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "250",
    # One broker leads everything and the controller stops with it: no point waiting to hand leaderships over.
    "TIDELOG_CONTROLLED_SHUTDOWN_ENABLE": "false",
}


def small_cluster(make_cluster: Any, coordinators: int = 1) -> tuple[Any, str, Admin]:
    c = make_cluster(controllers=1, brokers=1, coordinators=coordinators, cleaners=0, quotas=0, extra_env=GROUP_ENV)
    bootstrap = ",".join(p.address for p in c.procs("broker"))
    return c, bootstrap, Admin(bootstrap)


def find_coordinator(bootstrap: str, group: str) -> pb.GroupCoordinatorNode:
    stub = pb_grpc.BrokerStub(grpc.insecure_channel(bootstrap.split(",")[0]))

    def ready() -> pb.GroupCoordinatorNode | None:
        c = stub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=[group]), timeout=5).coordinators[0]
        return c if c.error_code == 0 else None

    return wait_for(ready, 30, what=f"a coordinator for {group}")


def produce(bootstrap: str, topic: str, n: int, start: int = 0) -> None:
    with Producer(bootstrap, linger_ms=2) as p:
        for i in range(start, start + n):
            p.send(topic, str(i).encode(), key=str(i).encode())
        p.flush()


class Member:
    """A `tidelog consume --group` process; its stdout lines are partition:offset<TAB>value."""

    def __init__(self, bootstrap: str, topic: str, group: str, tmp: str, name: str) -> None:
        self.out_path = os.path.join(tmp, f"{name}.out")
        self.err_path = os.path.join(tmp, f"{name}.err")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shared.cli.main", "consume", topic, "--group", group, "--from-beginning",
             "--print-offset", "--bootstrap-server", bootstrap],
            cwd=REPO, stdout=open(self.out_path, "wb"), stderr=open(self.err_path, "wb"))

    def values(self) -> list[str]:
        with open(self.out_path) as f:
            return [line.rstrip("\n").split("\t", 1)[1] for line in f if "\t" in line]

    def assigned(self) -> bool:
        with open(self.err_path) as f:
            err = f.read()
        assert self.proc.poll() is None, f"member exited: {err}"
        return "assigned:" in err


def test_three_group_consumers_spread_and_take_over_a_killed_one(make_cluster, tmp_path) -> None:
    c, bootstrap, admin = small_cluster(make_cluster)
    admin.create_topic("orders", partitions=6)
    find_coordinator(bootstrap, "G")
    members = [Member(bootstrap, "orders", "G", str(tmp_path), f"m{i}") for i in range(3)]
    try:
        wait_for(lambda: all(m.assigned() for m in members), 40, what="three members with partitions")
        produce(bootstrap, "orders", 600)
        wait_for(lambda: {v for m in members for v in m.values()} == {str(i) for i in range(600)}, 30,
                 what="the first 600 records")
        assert all(m.values() for m in members)  # the partitions are spread: everyone consumed
        members[0].proc.send_signal(signal.SIGKILL)
        members[0].proc.wait()
        produce(bootstrap, "orders", 600, start=600)
        wait_for(lambda: {v for m in members for v in m.values()} >= {str(i) for i in range(1200)}, 40,
                 what="every record, including those of the killed member's partitions")
    finally:
        for m in members:
            if m.proc.poll() is None:
                m.proc.send_signal(signal.SIGTERM)
        for m in members:
            try:
                m.proc.wait(10)
            except subprocess.TimeoutExpired:
                m.proc.kill()
        admin.close()


class Counting:
    def __init__(self) -> None:
        self.assigned: list[set[TopicPartition]] = []
        self.revoked: list[set[TopicPartition]] = []
        self.lost: list[set[TopicPartition]] = []

    def on_partitions_assigned(self, tps: set[TopicPartition]) -> None:
        self.assigned.append(tps)

    def on_partitions_revoked(self, tps: set[TopicPartition]) -> None:
        self.revoked.append(tps)

    def on_partitions_lost(self, tps: set[TopicPartition]) -> None:
        self.lost.append(tps)


def static_consumer(bootstrap: str, instance: str, listener: Counting) -> Consumer:
    consumer = Consumer(bootstrap, group_id="S", group_instance_id=instance, auto_offset_reset="earliest",
                        heartbeat_interval_ms=250)
    consumer.subscribe(["static"], listener=listener)
    return consumer


def poll_until(consumers: list[Consumer], predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(20)
        if predicate():
            return
    raise AssertionError(f"timed out waiting for {what}")


def test_static_members_restart_without_moving_partitions_and_a_duplicate_instance_is_refused(make_cluster) -> None:
    c, bootstrap, admin = small_cluster(make_cluster)
    admin.create_topic("static", partitions=6)
    check_regex_subscription(bootstrap, admin)
    check_commit_async_order(bootstrap)
    check_max_poll_interval(bootstrap)
    find_coordinator(bootstrap, "S")
    listeners = [Counting() for _ in range(3)]
    consumers = [static_consumer(bootstrap, f"i-{i}", listeners[i]) for i in range(3)]
    try:
        poll_until(consumers, lambda: sorted(len(x.assignment()) for x in consumers) == [2, 2, 2], 30, "a spread")
        before = {f"i-{i}": x.assignment() for i, x in enumerate(consumers)}
        for x in listeners:
            x.assigned.clear()
            x.revoked.clear()
        # A rolling restart: each static member closes (epoch -2) and comes back with the same instance id.
        for i in range(3):
            consumers[i].close()
            listeners[i] = Counting()
            consumers[i] = static_consumer(bootstrap, f"i-{i}", listeners[i])
            poll_until(consumers, lambda i=i: consumers[i].assignment() == before[f"i-{i}"], 20, f"i-{i} back")
        moved = sum(len(t) for x in listeners for t in x.revoked + x.lost)
        assert moved == 0
        assert {f"i-{i}": x.assignment() for i, x in enumerate(consumers)} == before
        dup = Consumer(bootstrap, group_id="S", group_instance_id="i-0", heartbeat_interval_ms=250)
        dup.subscribe(["static"])
        with pytest.raises(TidelogError) as err:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                dup.poll(50)
        assert err.value.code == ErrorCode.UNRELEASED_INSTANCE_ID
        dup.close()
        check_rest_and_cli(c, bootstrap, consumers)
    finally:
        for x in consumers:
            x.close()
        admin.close()


def check_regex_subscription(bootstrap: str, admin: Admin) -> None:
    """A pattern subscription picks up a topic created after the member joined."""
    consumer = Consumer(bootstrap, group_id="R", auto_offset_reset="earliest", heartbeat_interval_ms=250)
    find_coordinator(bootstrap, "R")
    consumer.subscribe(pattern="regex-.*")
    admin.create_topic("regex-a", partitions=1)
    poll_until([consumer], lambda: consumer.assignment() == {TopicPartition("regex-a", 0)}, 20, "regex-a")
    admin.create_topic("regex-b", partitions=2)
    admin.create_topic("other", partitions=1)
    want = {TopicPartition("regex-a", 0), TopicPartition("regex-b", 0), TopicPartition("regex-b", 1)}
    poll_until([consumer], lambda: consumer.assignment() == want, 20, "the new matching topic")
    consumer.close()


def check_commit_async_order(bootstrap: str) -> None:
    """commit_async: 300 commits of rising offsets pipelined on one stream are answered in call order,
    with no error, and the last one is what stays committed; a sync commit after them lands last."""
    consumer = Consumer(bootstrap, group_id="A", heartbeat_interval_ms=250)
    consumer.subscribe(["static"])
    poll_until([consumer], lambda: len(consumer.assignment()) == 6, 20, "the assignment")
    tp = TopicPartition("static", 3)
    answered: list[tuple[int, Exception | None]] = []
    for off in range(300):
        consumer.commit_async({tp: off}, lambda offsets, err: answered.append((offsets[tp], err)))
    consumer.commit({TopicPartition("static", 4): 7})  # waits for the async ones first
    assert answered == [(off, None) for off in range(300)]
    assert consumer.committed([tp, TopicPartition("static", 4)]) == {tp: 299, TopicPartition("static", 4): 7}
    consumer.close()


def check_max_poll_interval(bootstrap: str) -> None:
    """A member that does not poll for max.poll.interval.ms leaves; its partitions go to the other;
    at its next poll it reports them lost and joins again."""
    la, lb = Counting(), Counting()
    a = Consumer(bootstrap, group_id="P", heartbeat_interval_ms=250, max_poll_interval_ms=1500)
    b = Consumer(bootstrap, group_id="P", heartbeat_interval_ms=250)
    a.subscribe(["static"], listener=la)
    b.subscribe(["static"], listener=lb)
    poll_until([a, b], lambda: len(a.assignment()) == len(b.assignment()) == 3, 20, "a spread")
    poll_until([b], lambda: len(b.assignment()) == 6, 20, "b taking a's partitions")
    a.poll(10)
    assert len(la.lost) == 1 and len(la.lost[0]) == 3  # reported lost at the next poll, as Kafka does
    poll_until([a, b], lambda: len(a.assignment()) == len(b.assignment()) == 3, 20, "a back")
    a.close()
    b.close()


def check_rest_and_cli(c: Any, bootstrap: str, consumers: list[Consumer]) -> None:
    """REST /v1/groups and `tidelog groups` on the static group S of the test above."""
    produce(bootstrap, "static", 60)
    poll_until(consumers, lambda: True, 0.5, "")
    consumers[0].commit()
    rest = c.rest
    assert {"group_id": "S", "state": "Stable", "members": 3, "group_type": "consumer"} in httpx.get(
        f"{rest}/v1/groups").json()["groups"]
    d = httpx.get(f"{rest}/v1/groups/S").json()
    assert d["state"] == "Stable" and d["assignor"] == "uniform" and len(d["members"]) == 3
    assert sorted(m["instance_id"] for m in d["members"]) == ["i-0", "i-1", "i-2"]
    rows = {(p["topic"], p["partition"]): p for p in d["partitions"]}
    assert len(rows) == 6 and all(p["log_end_offset"] >= 0 for p in rows.values())
    committed = [p for p in rows.values() if p["committed_offset"] is not None]
    assert committed and all(p["lag"] == p["log_end_offset"] - p["committed_offset"] for p in committed)
    r = httpx.delete(f"{rest}/v1/groups/S")
    assert r.status_code == 409 and r.json()["error"] == "NON_EMPTY_GROUP"
    r = httpx.post(f"{rest}/v1/groups/S/offsets/reset", json={"topic": "static", "to": "earliest"})
    assert r.status_code == 409
    for x in consumers:  # static members leave with -2: the group empties once their sessions expire
        x.close()
    wait_for(lambda: httpx.get(f"{rest}/v1/groups/S").json()["state"] == "Empty", 20, what="the group to empty")
    runner = CliRunner()
    args = ["--rest", rest, "--bootstrap-server", bootstrap]
    out = runner.invoke(cli, ["groups", "reset-offsets", "S", "--topic", "static:0,1", "--to-offset", "1", *args])
    assert out.exit_code == 0, out.output
    r = httpx.post(f"{rest}/v1/groups/S/offsets/reset", json={"topic": "static", "partitions": [0], "to": "offset",
                                                               "value": 1, "execute": True})
    assert r.json()["partitions"][0]["new_offset"] == 1
    part0 = {p["partition"]: p for p in httpx.get(f"{rest}/v1/groups/S").json()["partitions"]}[0]
    assert part0["committed_offset"] == 1
    assert runner.invoke(cli, ["groups", "list", *args]).exit_code == 0
    assert runner.invoke(cli, ["groups", "delete", "S", *args]).exit_code == 0
    assert httpx.get(f"{rest}/v1/groups/S").status_code == 404
    out = runner.invoke(cli, ["bench", "group", "--partitions", "6", "--members", "2", "--seconds", "0.5", "--json", *args])
    assert out.exit_code == 0, out.output
    res = json.loads(out.output.strip().splitlines()[-1])
    assert res["cold_complete"] and res["commits_per_s"] > 0 and res["async_commits_per_s"] > 0
    assert res["commit_errors"] == 0
    assert res["join_partitions_moved_to_new_member"] == res["join_partitions_revoked_from_others"] == 2


def commit_direct(address: str, group: str, topic: str, offset: int) -> cpb.OffsetCommitResponse:
    stub = cpb_grpc.GroupCoordinatorStub(grpc.insecure_channel(address))
    return stub.OffsetCommit(cpb.OffsetCommitRequest(group_id=group, member_epoch=-1, topics=[
        cpb.OffsetCommitTopic(name=topic, partitions=[cpb.OffsetCommitPartition(partition=0, committed_offset=offset)])]),
        timeout=10)


def owner_proc(c: Any, node: pb.GroupCoordinatorNode) -> Any:
    return next(p for p in c.procs("coordinator") if p.address == node.address)


def test_coordinator_faults_pause_fences_the_old_owner_and_kill_loses_no_acknowledged_commit(make_cluster) -> None:
    c, bootstrap, admin = small_cluster(make_cluster, coordinators=2)
    admin.create_topic("faults", partitions=2)
    first = find_coordinator(bootstrap, "F")
    for proc in c.procs("coordinator"):  # every coordinator instance answers FindCoordinator as the brokers do
        stub = cpb_grpc.GroupCoordinatorStub(grpc.insecure_channel(proc.address))
        wait_for(lambda stub=stub: stub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=["F"]), timeout=5)
                 .coordinators[0].address == first.address, 10, what="the same answer from every coordinator")
    wait_for(lambda: commit_direct(first.address, "F", "faults", 1).error_code == 0, 30, what="the group served")

    # SIGSTOP the owner until the other instance has taken the partition over and serves it.
    paused = owner_proc(c, first)
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        second = wait_for(lambda: (n := find_coordinator(bootstrap, "F")).address != first.address and n, 30,
                          what="ownership to move")
        wait_for(lambda: commit_direct(second.address, "F", "faults", 2).error_code == 0, 30, what="the new owner serving")
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    # The woken owner still believes it owns the group: whatever it writes as that old owner is refused (its
    # producer epoch is fenced). It may also win the partition back at once, legitimately (a new epoch): then,
    # and only then, its write stands.
    stale = commit_direct(first.address, "F", "faults", 999)
    accepted = stale.error_code == 0 and stale.topics[0].partitions[0].error_code == 0
    assert not accepted or find_coordinator(bootstrap, "F").address == first.address, stale
    # Wherever the group lives now, the last accepted commit stands.
    group_client = GroupCoordinatorClient(ClusterClient(bootstrap, "test"), "F")
    fetched = group_client.call("OffsetFetch", cpb.OffsetFetchRequest(group_id="F"))
    expected = 999 if accepted else 2
    assert fetched.error_code == 0 and fetched.topics[0].partitions[0].committed_offset == expected, fetched
    group_client.close()

    # kill -9 the (new) owner while a member commits: nothing acknowledged may be lost.
    consumer = Consumer(bootstrap, group_id="F2", auto_offset_reset="earliest", heartbeat_interval_ms=250,
                        enable_auto_commit=False)
    find_coordinator(bootstrap, "F2")
    consumer.subscribe(["faults"])
    poll_until([consumer], lambda: len(consumer.assignment()) == 2, 30, "the member's partitions")
    acked: dict[TopicPartition, int] = {}
    stop = threading.Event()
    errors: list[Exception] = []

    def commit_loop() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            offsets = {tp: n for tp in consumer.assignment()}
            try:
                consumer.commit(offsets)
                acked.update(offsets)
            except TidelogError as exc:
                errors.append(exc)

    owner = owner_proc(c, find_coordinator(bootstrap, "F2"))
    t = threading.Thread(target=commit_loop)
    t.start()
    try:
        wait_for(lambda: len(acked) == 2 and min(acked.values()) > 20, 20, what="some acknowledged commits")
        os.kill(owner.pid, signal.SIGKILL)
        before = dict(acked)
        wait_for(lambda: all(acked.get(tp, 0) > v for tp, v in before.items()), 40,
                 what="commits acknowledged by the next owner")
    finally:
        stop.set()
        t.join(30)
    last = dict(acked)
    committed = consumer.committed(last)
    assert all(committed[tp] is not None and committed[tp] >= off for tp, off in last.items()), (committed, last)
    consumer.close()
    admin.close()
