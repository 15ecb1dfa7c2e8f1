"""Partition reassignment (KIP-455) with real processes: three brokers, a fourth started later, replicas
moved onto it through ``tidelog reassign``; a cancelled move; a move that survives kill -9 of the active
controller (a standby takes over and completes it)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from shared.cli.main import cli
from shared.client import Admin, Consumer, Producer, TopicPartition
from tests.conftest import Cluster, kill_cluster, start_cluster, wait_for
from tests.integration.chaos import read_replica_logs

ENV = {"TIDELOG_REPLICA_LAG_TIME_MAX_MS": "3000"}
RECORDS = 300
TOPICS = ("moving", "cancelled", "failover")


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str, Admin]]:
    """Two controllers, three brokers, then a fourth broker started by hand (as an operator would)."""
    c = start_cluster(str(tmp_path_factory.mktemp("reassign")), controllers=2, brokers=3, cleaners=0,
                      coordinators=0, quotas=0, extra_env=ENV)
    admin = Admin(",".join(p.address for p in c.procs("broker")))
    for topic in TOPICS:  # with data, on the first three brokers
        ready_topic(admin, admin.bootstrap_servers, topic)  # type: ignore[arg-type]
    admin.close()
    proc = c.lc.start_service("broker", 4)
    c.lc.wait_ready([proc], 30)
    bootstrap = ",".join(p.address for p in c.procs("broker"))
    admin = Admin(bootstrap)
    wait_for(lambda: 4 in [b["id"] for b in c.cluster_view()["brokers"]], 20, what="broker 4 registered")
    try:
        yield c, bootstrap, admin
    finally:
        admin.close()
        kill_cluster(c)


def run(c: Cluster, bootstrap: str, *args: str) -> Any:
    return CliRunner().invoke(cli, [*args, "--rest", c.rest, "--bootstrap-server", bootstrap])


def write_plan(tmp: Any, name: str, moves: dict[tuple[str, int], list[int]]) -> str:
    path = os.path.join(str(tmp), name)
    with open(path, "w") as f:
        json.dump({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": r,
                                                  "log_dirs": ["any"] * len(r)} for (t, p), r in moves.items()]}, f)
    return path


def produce(bootstrap: str, topic: str, n: int) -> None:
    with Producer(bootstrap, acks="all") as p:
        futures = [p.send(topic, f"v-{i}".encode(), partition=i % 2) for i in range(n)]
        for fut in futures:
            fut.get(20)


def consume_all(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    consumer = Consumer(bootstrap, auto_offset_reset="earliest")
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while consumer.position(tp) < end and time.monotonic() < deadline:
            values += [r.value for r in consumer.poll(500)]
        return values
    finally:
        consumer.close()


def partition_row(admin: Admin, topic: str, p: int) -> dict[str, Any]:
    return admin.describe_topic(topic)["partitions"][p]


def ready_topic(admin: Admin, bootstrap: str, topic: str) -> None:
    admin.create_topic(topic, partitions=2, replication_factor=2, configs={"min.insync.replicas": 1})
    wait_for(lambda: all(len(p["isr"]) == 2 for p in admin.describe_topic(topic)["partitions"]), 20, what="full ISR")
    produce(bootstrap, topic, RECORDS)


def test_generate_prints_kafkas_two_plans(grown, tmp_path) -> None:
    c, bootstrap, admin = grown
    admin.create_topic("gen", partitions=3, replication_factor=2)
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": "gen"}]}))
    r = run(c, bootstrap, "reassign", "generate", "--topics-to-move-json-file", str(topics_file),
            "--broker-list", "2,3,4")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert lines[3] == "Proposed partition reassignment configuration"
    current, proposed = json.loads(lines[1]), json.loads(lines[4])
    assert current["version"] == 1 and len(current["partitions"]) == 3
    assert all(set(p["replicas"]) <= {2, 3, 4} and p["log_dirs"] == ["any", "any"] for p in proposed["partitions"])


def test_move_a_partition_onto_the_new_broker(grown, tmp_path) -> None:
    c, bootstrap, admin = grown
    topic = "moving"
    before = partition_row(admin, topic, 0)
    target = [4] + [b for b in before["replicas"] if b != before["leader"]]  # the leader is replaced
    plan = write_plan(tmp_path, "plan.json", {(topic, 0): target})
    r = run(c, bootstrap, "reassign", "execute", "--reassignment-json-file", plan, "--throttle", "1000000")
    assert r.exit_code == 0, r.output
    assert "Save this to use as the --reassignment-json-file option during rollback" in r.output
    assert "Successfully started partition reassignment for moving-0" in r.output
    assert "The inter-broker throttle limit was set to 1000000 B/s" in r.output

    def verified() -> bool:
        v = run(c, bootstrap, "reassign", "verify", "--reassignment-json-file", plan)
        assert v.exit_code in (0, 1), v.output
        return v.exit_code == 0 and "Reassignment of partition moving-0 is completed." in v.output

    wait_for(verified, 30, interval=0.5, what="verify to pass")
    after = partition_row(admin, topic, 0)
    assert after["replicas"] == target and sorted(after["isr"]) == sorted(target)
    assert after["leader"] in target and after["leader_epoch"] > before["leader_epoch"]
    assert httpx.get(f"{c.rest}/v1/reassignments", timeout=5).json() == {"reassignments": []}
    assert consume_all(bootstrap, topic, 0) == [f"v-{i}".encode() for i in range(0, RECORDS, 2)]
    data_dir = c.lc.data_dir
    wait_for(lambda: len(set(map(tuple, read_replica_logs(data_dir, target, topic, 0).values()))) == 1, 20,
             what="the new replica holds the same records")
    assert len(read_replica_logs(data_dir, [4], topic, 0)[4]) == RECORDS // 2
    removed = before["leader"]
    wait_for(lambda: not os.path.exists(os.path.join(data_dir, f"broker-{removed}", f"{topic}-0")), 20,
             what="the removed replica deleted")


def test_cancel_returns_to_the_original_replicas(grown, tmp_path) -> None:
    c, bootstrap, admin = grown
    topic = "cancelled"
    before = partition_row(admin, topic, 1)
    target = [4] + before["replicas"][1:]
    plan = write_plan(tmp_path, "plan.json", {(topic, 1): target})
    new_broker = c.proc("broker", 4)
    os.kill(new_broker.pid, signal.SIGSTOP)  # it cannot catch up: the move stays in progress
    try:
        assert run(c, bootstrap, "reassign", "execute", "--reassignment-json-file", plan).exit_code == 0
        listed = httpx.get(f"{c.rest}/v1/reassignments", timeout=5).json()["reassignments"]
        assert [(r["topic"], r["partition"], r["adding_replicas"]) for r in listed] == [(topic, 1, [4])]
        v = run(c, bootstrap, "reassign", "verify", "--reassignment-json-file", plan)
        assert v.exit_code == 1 and "Reassignment of partition cancelled-1 is still in progress." in v.output
        r = run(c, bootstrap, "reassign", "cancel", "--reassignment-json-file", plan)
        assert r.exit_code == 0 and "Successfully cancelled partition reassignments for: cancelled-1" in r.output
        after = partition_row(admin, topic, 1)
        assert after["replicas"] == before["replicas"] and 4 not in after["isr"]
        assert httpx.get(f"{c.rest}/v1/reassignments", timeout=5).json() == {"reassignments": []}
        again = run(c, bootstrap, "reassign", "cancel", "--reassignment-json-file", plan)
        assert "None of the specified partition reassignments are active." in again.output
    finally:
        os.kill(new_broker.pid, signal.SIGCONT)
    assert consume_all(bootstrap, topic, 1) == [f"v-{i}".encode() for i in range(1, RECORDS, 2)]


def test_bad_bodies_are_refused_with_kafkas_errors(grown) -> None:
    c, _, _ = grown
    url = f"{c.rest}/v1/reassignments"
    cases = [
        ({"version": 1}, 400, "INVALID_REQUEST"),
        ({"version": 2, "partitions": [{"topic": "moving", "partition": 0, "replicas": [1]}]}, 400, "INVALID_REQUEST"),
        ({"version": 1, "partitions": [{"topic": "moving", "partition": 0, "replicas": ["1"]}]}, 400, "INVALID_REQUEST"),
        ({"version": 1, "partitions": [{"topic": "moving", "partition": 0, "replicas": [1, 1]}]}, 400,
         "INVALID_REPLICA_ASSIGNMENT"),
        ({"version": 1, "partitions": [{"topic": "moving", "partition": 0, "replicas": [1, 99]}]}, 400,
         "INVALID_REPLICA_ASSIGNMENT"),
        ({"version": 1, "partitions": [{"topic": "moving", "partition": 0, "replicas": [1, 2],
                                        "log_dirs": ["/data"]}]}, 400, "INVALID_REQUEST"),
        ({"version": 1, "partitions": [{"topic": "nope", "partition": 0, "replicas": [1]}]}, 404,
         "UNKNOWN_TOPIC_OR_PARTITION"),
    ]
    for body, status, error in cases:
        r = httpx.post(url, json=body, timeout=5)
        assert (r.status_code, r.json()["error"]) == (status, error), (body, r.text)
        assert r.json()["message"]
    r = httpx.request("DELETE", url, json={"partitions": [{"topic": "moving", "partition": 1}]}, timeout=5)
    assert (r.status_code, r.json()["error"]) == (400, "NO_REASSIGNMENT_IN_PROGRESS")


def test_a_move_survives_kill_9_of_the_active_controller(grown, tmp_path) -> None:
    c, bootstrap, admin = grown
    topic = "failover"
    before = partition_row(admin, topic, 0)
    target = [b for b in before["replicas"] if b != before["leader"]] + [4]
    plan = write_plan(tmp_path, "plan.json", {(topic, 0): target})
    new_broker = c.proc("broker", 4)
    active = c.cluster_view()["controller"]["id"]
    os.kill(new_broker.pid, signal.SIGSTOP)
    try:
        assert run(c, bootstrap, "reassign", "execute", "--reassignment-json-file", plan).exit_code == 0
        listed = httpx.get(f"{c.rest}/v1/reassignments", timeout=5).json()["reassignments"]
        assert [(r["topic"], r["adding_replicas"]) for r in listed] == [(topic, [4])]  # in progress when killed
        victim = c.proc("controller", active)
        os.kill(victim.pid, signal.SIGKILL)
        victim.popen.wait(10)
        standby_rest = next(p.info["rest"] for p in c.procs("controller"))
        # "controller" is null while no controller is active (the standby has not taken over yet)
        wait_for(lambda: (httpx.get(f"{standby_rest}/v1/cluster", timeout=3).json()["controller"] or {}).get("id")
                 not in (None, active), 30, what="the standby controller to take over")
    finally:
        os.kill(new_broker.pid, signal.SIGCONT)

    def done() -> bool:
        row = partition_row(admin, topic, 0)
        return row["replicas"] == target and sorted(row["isr"]) == sorted(target)

    wait_for(done, 45, interval=0.5, what="the reassignment completed by the new controller")
    assert httpx.get(f"{standby_rest}/v1/reassignments", timeout=5).json() == {"reassignments": []}
    assert consume_all(bootstrap, topic, 0) == [f"v-{i}".encode() for i in range(0, RECORDS, 2)]


def test_topics_alter_replication_factor_up_and_down(grown) -> None:
    c, bootstrap, admin = grown
    topic = "rf"
    admin.create_topic(topic, partitions=3, replication_factor=1)
    produce(bootstrap, topic, 40)
    r = run(c, bootstrap, "topics", "alter", topic, "--replication-factor", "3")
    assert r.exit_code == 0, r.output
    rows = admin.describe_topic(topic)["partitions"]
    assert all(len(p["replicas"]) == 3 and len(p["isr"]) == 3 for p in rows), rows
    assert admin.describe_topic(topic)["replication_factor"] == 3
    preferred = {p["partition"]: p["replicas"][0] for p in rows}
    r = run(c, bootstrap, "topics", "alter", topic, "--replication-factor", "2")
    assert r.exit_code == 0, r.output
    rows = admin.describe_topic(topic)["partitions"]
    assert all(len(p["replicas"]) == 2 and p["replicas"][0] == preferred[p["partition"]] for p in rows), rows
    assert sum(len(consume_all(bootstrap, topic, p)) for p in range(3)) == 40


def test_decommission_moves_every_replica_and_leadership_off(grown) -> None:
    """Runs last: after the controller failover above, the CLI finds the new active controller."""
    c, bootstrap, admin = grown
    r = run(c, bootstrap, "brokers", "decommission", "4", "--timeout", "60")
    assert r.exit_code == 0, r.output
    assert "Broker 4 holds no replicas and leads no partitions: it is safe to stop." in r.output
    for t in admin.list_topics():
        for p in admin.describe_topic(t)["partitions"]:
            assert 4 not in p["replicas"] and p["leader"] != 4, (t, p)
    assert consume_all(bootstrap, "moving", 0) == [f"v-{i}".encode() for i in range(0, RECORDS, 2)]
