"""Replication throttles with real processes: a follower catching up a backlog from outside the ISR
moves bytes at about ``follower.replication.throttled.rate`` when the topic names it in
``follower.replication.throttled.replicas`` (set through shared.cli.throttle, as `reassign --throttle` does),
and at full speed once the throttle is removed."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from shared.cli.throttle import clear_reassignment_throttle, set_reassignment_throttle
from shared.client import Admin, Producer
from tests.conftest import wait_for

RATE = 1_000_000  # bytes/s
BACKLOG = 8_000_000  # bytes produced while the follower is down


def partition_bytes(cluster, broker: int, topic: str, partition: int) -> int:
    d = os.path.join(cluster.lc.data_dir, f"broker-{broker}")
    total = 0
    for root, _, files in os.walk(d):
        if os.path.basename(root) == f"{topic}-{partition}":
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files if f.endswith(".log"))
    return total


@pytest.mark.parametrize("side", ["both", "leader"])
def test_follower_catch_up_is_held_near_the_throttled_rate(make_cluster, side: str) -> None:
    """``both``: as `reassign --throttle` sets it; ``leader``: only the leader's side (the leader's rate and
    its leader.replication.throttled.replicas entry), the follower fetching without limit."""
    c = make_cluster(controllers=1, brokers=2, cleaners=0, coordinators=0, quotas=0,
                     extra_env={"TIDELOG_REPLICA_LAG_TIME_MAX_MS": "3000"})
    bootstrap = ",".join(p.address for p in c.procs("broker"))
    admin = Admin(bootstrap)
    topic = "throttled"
    try:
        admin.create_topic(topic, partitions=1, replication_factor=2)
        wait_for(lambda: len(admin.describe_topic(topic)["partitions"][0]["isr"]) == 2, 30, what="full ISR")
        leader = admin.describe_topic(topic)["partitions"][0]["leader"]
        follower = 3 - leader
        proc = c.proc("broker", follower)
        os.kill(proc.pid, signal.SIGKILL)
        proc.popen.wait(10)
        wait_for(lambda: admin.describe_topic(topic)["partitions"][0]["isr"] == [leader], 30, what="ISR shrunk")

        value = os.urandom(10_000)  # incompressible
        with Producer(bootstrap, acks=1, linger_ms=5, batch_size=64 * 1024) as producer:
            for _ in range(BACKLOG // len(value)):
                producer.send(topic, value, partition=0)
            producer.flush(60)
        backlog = partition_bytes(c, leader, topic, 0)
        assert backlog >= BACKLOG

        if side == "both":  # as `tidelog reassign execute --throttle` would for a partition moving onto the follower
            set_reassignment_throttle(admin, RATE, {(topic, 0): ([follower], [leader])})
            assert httpx.get(f"{admin.rest_url}/v1/brokers/{follower}/configs").json()["configs"] == {
                "leader.replication.throttled.rate": RATE, "follower.replication.throttled.rate": RATE}
            assert admin.describe_topic(topic)["configs"]["follower.replication.throttled.replicas"] == f"0:{follower}"
        else:
            r = httpx.patch(f"{admin.rest_url}/v1/brokers/{leader}/configs",
                            json={"configs": {"leader.replication.throttled.rate": RATE}})
            assert r.status_code == 200, r.text
            admin.alter_configs(topic, {"leader.replication.throttled.replicas": f"0:{leader}"})

        restarted = c.restart("broker", follower)
        started, start_bytes = time.monotonic(), partition_bytes(c, follower, topic, 0)
        samples = []
        while time.monotonic() - started < 60:
            got = partition_bytes(c, follower, topic, 0)
            samples.append((time.monotonic() - started, got))
            if got >= backlog * 0.9:
                break
            time.sleep(0.25)
        elapsed, moved = samples[-1][0], samples[-1][1] - start_bytes
        assert moved >= backlog * 0.9 - start_bytes, samples[-5:]
        rate = moved / elapsed
        assert 0.5 * RATE <= rate <= 1.5 * RATE, (rate, elapsed, moved)

        # The throttled broker's metrics show the limit and the throttled bytes it moved.
        direction, where = ("follower", restarted) if side == "both" else ("leader", c.proc("broker", leader))
        metrics = httpx.get(f"http://{where.info['metrics']}/metrics", timeout=5).text
        def value(name: str) -> float:
            return next(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(name + " "))

        assert value(f'tidelog_replication_throttled_rate_limit_bytes{{direction="{direction}"}}') == RATE
        assert value(f'tidelog_replication_throttled_bytes_total{{direction="{direction}"}}') >= moved * 0.5

        clear_reassignment_throttle(admin, [leader, follower], [topic])
        assert httpx.get(f"{admin.rest_url}/v1/brokers/{follower}/configs").json()["configs"] == {}
        wait_for(lambda: len(admin.describe_topic(topic)["partitions"][0]["isr"]) == 2, 30, what="follower back in ISR")
    finally:
        admin.close()
