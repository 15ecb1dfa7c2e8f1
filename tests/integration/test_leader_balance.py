"""Automatic leader balancing (auto.leader.rebalance.enable) with real processes: a killed broker's
preferred leaderships come back to it on their own once it has rejoined the ISR; a broker in controlled
shutdown is neither added back to an ISR nor made a preferred leader again until it restarts (KIP-841)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import grpc
import pytest

from shared.client import Admin
from shared.errors import ErrorCode
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from tests.conftest import Cluster, kill_cluster, start_cluster, wait_for

INTERVAL_S = 2
ENV = {"TIDELOG_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS": str(INTERVAL_S), "TIDELOG_REPLICA_LAG_TIME_MAX_MS": "3000"}


def leaders(admin: Admin, topic: str) -> dict[int, tuple[int, int, list[int]]]:
    """partition -> (leader, preferred, isr)"""
    return {p["partition"]: (p["leader"], p["replicas"][0], p["isr"]) for p in admin.describe_topic(topic)["partitions"]}


def all_preferred(admin: Admin, topic: str) -> bool:
    got = leaders(admin, topic)
    return all(leader == pref and len(isr) == 3 for leader, pref, isr in got.values())


@pytest.fixture(scope="module")
def balanced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Admin]]:
    c = start_cluster(str(tmp_path_factory.mktemp("balance")), controllers=1, brokers=3, cleaners=0,
                      coordinators=0, quotas=0, extra_env=ENV)
    admin = Admin(",".join(p.address for p in c.procs("broker")))
    yield c, admin
    admin.close()
    kill_cluster(c)


def _balanced_topic(admin: Admin, topic: str, partitions: int) -> tuple[int, list[int]]:
    """A new RF 3 topic once every partition has its preferred leader and a full ISR: partition 0's
    preferred leader, and the partitions that prefer it."""
    admin.create_topic(topic, partitions=partitions, replication_factor=3)
    wait_for(lambda: all_preferred(admin, topic), 30, what="preferred leaders and full ISR")
    victim = leaders(admin, topic)[0][1]
    return victim, [p for p, (_, pref, _) in leaders(admin, topic).items() if pref == victim]


def test_preferred_leaders_come_back_after_a_broker_restarts(balanced: tuple[Cluster, Admin]) -> None:
    c, admin = balanced
    topic = "balanced"
    victim, preferring = _balanced_topic(admin, topic, 6)
    proc = c.proc("broker", victim)
    os.kill(proc.pid, signal.SIGKILL)
    proc.popen.wait(10)
    wait_for(lambda: all(leaders(admin, topic)[p][0] not in (victim, -1) for p in preferring), 30,
             what="leadership moved off the killed broker")
    c.restart("broker", victim)
    wait_for(lambda: all_preferred(admin, topic), 30 + 3 * INTERVAL_S, what="preferred leaders back")
    assert all(leaders(admin, topic)[p][0] == victim for p in preferring)


def test_a_broker_in_controlled_shutdown_is_not_made_leader_or_isr_member_again(balanced: tuple[Cluster, Admin]) -> None:
    """Between its controlled shutdown and its exit a broker still fetches: its leaders would add it back to
    the ISR, and the preferred-leader election would give it back the leaderships it just handed over (seen
    in CI during a rolling restart). The broker here asks for its controlled shutdown and keeps running."""
    c, admin = balanced
    topic = "shutting-down"
    victim, preferring = _balanced_topic(admin, topic, 3)
    view = c.cluster_view()
    incarnation = next(b["incarnation"] for b in view["brokers"] if b["id"] == victim)
    with grpc.insecure_channel(view["controller"]["address"]) as channel:
        resp = pb_grpc.ControllerStub(channel).ControlledShutdown(
            pb.ControlledShutdownRequest(broker_id=victim, incarnation=incarnation), timeout=10)
    assert resp.error_code == ErrorCode.NONE
    moved = leaders(admin, topic)
    assert all(moved[p][0] != victim and victim not in moved[p][2] for p in preferring), moved
    time.sleep(3 * INTERVAL_S)  # several balancer rounds, and the victim keeps fetching meanwhile
    held = leaders(admin, topic)
    assert all(leader != victim and victim not in isr for leader, _, isr in held.values()), held
    # A controller that takes over meanwhile (here: the only one, killed and restarted) knows it from etcd.
    controller = c.proc("controller", view["controller"]["id"])
    os.kill(controller.pid, signal.SIGKILL)
    controller.popen.wait(10)
    rest = c.restart("controller", int(view["controller"]["id"])).info["rest"]
    wait_for(lambda: (c.cluster_view(via=rest).get("controller") or {}).get("epoch", 0) > view["controller"]["epoch"],
             30, what="the restarted controller active")
    time.sleep(3 * INTERVAL_S)
    held = leaders(admin, topic)
    assert all(leader != victim and victim not in isr for leader, _, isr in held.values()), held
    # A restart is a new incarnation: eligible again, and its preferred leaderships come back.
    proc = c.proc("broker", victim)
    os.kill(proc.pid, signal.SIGKILL)
    proc.popen.wait(10)
    c.restart("broker", victim)
    wait_for(lambda: all_preferred(admin, topic), 30 + 3 * INTERVAL_S, what="preferred leaders back after the restart")
