"""Automatic leader balancing (auto.leader.rebalance.enable) with real processes: a killed broker's
preferred leaderships come back to it on their own once it has rejoined the ISR."""

from __future__ import annotations

import os
import signal

from shared.client import Admin
from tests.conftest import wait_for

INTERVAL_S = 2
ENV = {"TIDELOG_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS": str(INTERVAL_S), "TIDELOG_REPLICA_LAG_TIME_MAX_MS": "3000"}


def leaders(admin: Admin, topic: str) -> dict[int, tuple[int, int, list[int]]]:
    """partition -> (leader, preferred, isr)"""
    return {p["partition"]: (p["leader"], p["replicas"][0], p["isr"]) for p in admin.describe_topic(topic)["partitions"]}


def all_preferred(admin: Admin, topic: str) -> bool:
    got = leaders(admin, topic)
    return all(leader == pref and len(isr) == 3 for leader, pref, isr in got.values())


def test_preferred_leaders_come_back_after_a_broker_restarts(make_cluster) -> None:
    c = make_cluster(controllers=1, brokers=3, cleaners=0, coordinators=0, quotas=0, extra_env=ENV)
    admin = Admin(",".join(p.address for p in c.procs("broker")))
    try:
        topic = "balanced"
        admin.create_topic(topic, partitions=6, replication_factor=3)
        wait_for(lambda: all_preferred(admin, topic), 30, what="preferred leaders and full ISR")
        victim = leaders(admin, topic)[0][1]
        preferring = [p for p, (_, pref, _) in leaders(admin, topic).items() if pref == victim]
        proc = c.proc("broker", victim)
        os.kill(proc.pid, signal.SIGKILL)
        proc.popen.wait(10)
        wait_for(lambda: all(leaders(admin, topic)[p][0] not in (victim, -1) for p in preferring), 30,
                 what="leadership moved off the killed broker")
        c.restart("broker", victim)
        wait_for(lambda: all_preferred(admin, topic), 30 + 3 * INTERVAL_S, what="preferred leaders back")
        assert all(leaders(admin, topic)[p][0] == victim for p in preferring)
    finally:
        admin.close()
