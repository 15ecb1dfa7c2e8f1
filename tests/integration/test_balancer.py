"""The continuous balancer with real processes: three brokers holding a topic with data, two brokers
added while the balancer is paused (it sees the imbalance and moves nothing), then resumed: within a
minute the replica counts across the five brokers are within one of each other and every record is
still there. ``tidelog balancer status|pause|resume`` drive and show it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from services.controller.balancer import PartitionView, skew
from shared.cli.main import cli
from shared.client import Admin, Consumer, Producer, TopicPartition
from tests.conftest import Cluster, kill_cluster, start_cluster, wait_for

ENV = {"TIDELOG_REPLICA_LAG_TIME_MAX_MS": "3000", "TIDELOG_BALANCER_ENABLE": "true",
       "TIDELOG_BALANCER_CHECK_INTERVAL_MS": "1000", "TIDELOG_BALANCER_MAX_CONCURRENT_MOVES": "6",
       "TIDELOG_BALANCER_THROTTLE_BYTES_PER_SECOND": "20000000"}
TOPIC = "spread"
PARTITIONS = 12
RECORDS = 1200


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(str(tmp_path_factory.mktemp("balancer")), controllers=1, brokers=3, cleaners=0,
                      coordinators=0, quotas=0, extra_env=ENV)
    try:
        yield c
    finally:
        kill_cluster(c)


def run(c: Cluster, *args: str) -> Any:
    return CliRunner().invoke(cli, [*args, "--rest", c.rest])


def status(c: Cluster) -> dict[str, Any]:
    resp = httpx.get(f"{c.rest}/v1/balancer", timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


def views(admin: Admin) -> list[PartitionView]:
    out = []
    for t in admin.list_topics():
        for p in admin.describe_topic(t)["partitions"]:
            out.append(PartitionView(TopicPartition(t, p["partition"]), tuple(p["replicas"])))
    return out


def reassigning(c: Cluster) -> list[Any]:
    return httpx.get(f"{c.rest}/v1/reassignments", timeout=10).json()["reassignments"]


def consume_counts(bootstrap: str) -> dict[int, int]:
    consumer = Consumer(bootstrap, auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        counts = {p: 0 for p in range(PARTITIONS)}
        offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for r in consumer.poll(500):
                counts[r.partition] += 1
                offsets[r.partition].append(r.offset)
        for p, offs in offsets.items():
            assert offs == list(range(len(offs))), f"partition {p}: offsets not contiguous from 0"
        return counts
    finally:
        consumer.close()


def test_added_brokers_are_filled_by_the_balancer_and_pause_holds_it(cluster3: Cluster) -> None:
    c = cluster3
    bootstrap = ",".join(p.address for p in c.procs("broker"))
    admin = Admin(bootstrap)
    try:
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=2)
        wait_for(lambda: all(len(p["isr"]) == 2 for p in admin.describe_topic(TOPIC)["partitions"]), 20,
                 what="full ISR")
        with Producer(bootstrap, acks="all") as producer:
            futures = [producer.send(TOPIC, f"v-{i}".encode() * 50, partition=i % PARTITIONS) for i in range(RECORDS)]
            for fut in futures:
                fut.get(30)
        r = run(c, "balancer", "pause")
        assert r.exit_code == 0 and "paused" in r.output, r.output

        # Two brokers join: the paused balancer sees them and moves nothing.
        procs = [c.lc.start_service("broker", 4), c.lc.start_service("broker", 5)]
        c.lc.wait_ready(procs, 30)
        wait_for(lambda: {4, 5} <= {b["id"] for b in c.cluster_view()["brokers"]}, 20, what="brokers registered")
        wait_for(lambda: any("joined" in t for t in status(c)["last_triggers"]), 15, interval=0.3,
                 what="the balancer to see the new brokers")
        time.sleep(2.2)  # two more checks while paused
        s = status(c)
        assert s["paused"] and s["idle_reason"] == "paused" and s["moves_started"] == 0, s
        assert reassigning(c) == []
        r = run(c, "balancer", "status")
        assert r.exit_code == 0 and "Balancer: paused" in r.output and "joined" in r.output, r.output

        # Resumed, it spreads the replicas over five brokers.
        r = run(c, "balancer", "resume")
        assert r.exit_code == 0 and "resumed" in r.output, r.output
        seen_moves: list[dict[str, Any]] = []

        def balanced() -> bool:
            s = status(c)
            seen_moves.extend(s["moves_in_flight"])
            return skew(views(admin), [1, 2, 3, 4, 5])["replicas"] <= 1 and not reassigning(c) \
                and not s["moves_in_flight"]

        started = time.monotonic()
        try:
            wait_for(balanced, 60, interval=0.5, what="replica counts within one across five brokers")
        except AssertionError:
            raise AssertionError(f"not balanced: skew {skew(views(admin), [1, 2, 3, 4, 5])}, in flight "
                                 f"{reassigning(c)}, status {status(c)}") from None
        elapsed = time.monotonic() - started
        s = status(c)
        assert s["moves_started"] > 0 and s["moves_completed"] == s["moves_started"], s
        assert seen_moves or s["last_plan"], s
        assert {m["goal"] for m in s["last_plan"]} <= {"racks", "availability", "replicas", "leaders", "bytes"}
        counts = {b: 0 for b in (1, 2, 3, 4, 5)}
        for v in views(admin):
            for b in v.replicas:
                counts[b] += 1
        assert min(counts[4], counts[5]) > 0, counts
        # The throttle the balancer set is gone once nothing moves.
        wait_for(lambda: all(httpx.get(f"{c.rest}/v1/brokers/{b}/configs", timeout=5).json()["configs"] == {}
                             for b in (1, 2, 3, 4, 5)), 10, what="balancer throttle cleared")
        # Nothing lost: every offset of every partition is there.
        bootstrap = ",".join(p.address for p in c.procs("broker"))
        got = consume_counts(bootstrap)
        assert got == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}, got
        print(f"balanced in {elapsed:.1f}s, counts {counts}, moves {s['moves_started']}")

        # Paused again, a new imbalance starts no move.
        r = run(c, "balancer", "pause")
        assert r.exit_code == 0, r.output
        httpx.post(f"{c.rest}/v1/balancer/decommissioning/5", timeout=10).raise_for_status()
        wait_for(lambda: any("excluded" in t for t in status(c)["last_triggers"]), 10, interval=0.3,
                 what="the decommissioning mark seen")
        time.sleep(1.5)
        assert reassigning(c) == [] and status(c)["moves_started"] == s["moves_started"]
        assert status(c)["decommissioning"] == [5]
        run(c, "balancer", "resume")
        wait_for(lambda: not any(5 in v.replicas for v in views(admin)) and not reassigning(c), 40, interval=0.5,
                 what="broker 5 emptied by the balancer")
    finally:
        admin.close()
