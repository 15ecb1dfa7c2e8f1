"""Controller metrics: election classification, counts at scrape time, etcd transactions."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from services.controller.metrics import ControllerObserver, election_type
from shared.metadata.types import PartitionState
from shared.metrics import parse, total
from shared.types import TopicPartition

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


def test_election_types() -> None:
    before = PartitionState(1, 3, [1, 2], 5)
    assert election_type("broker change", before, PartitionState(2, 4, [2], 6)) == "clean"
    assert election_type("broker change", before, PartitionState(3, 4, [3], 6)) == "unclean"
    assert election_type("preferred leader election", PartitionState(2, 4, [1, 2], 6), before) == "preferred"
    assert election_type("controlled shutdown of 1", before, PartitionState(2, 4, [2], 6)) == "controlled_shutdown"
    assert election_type("broker change", before, PartitionState(1, 3, [1], 6)) is None  # ISR shrink only
    assert election_type("broker change", before, PartitionState(-1, 4, [1, 2], 6)) is None  # offline


def test_observer_counts_elections_and_offline_partitions_for_the_active_controller_only() -> None:
    reg = CollectorRegistry()
    epoch = [7]
    obs = ControllerObserver(lambda: epoch[0], reg)
    obs.loaded({T0: (PartitionState(1, 0, [1, 2], 0), 10), T1: (PartitionState(2, 0, [2], 0), 11),
                T2: (PartitionState(1, 0, [1], 0), 12)})
    obs.applied({T0: PartitionState(2, 1, [2], 1), T2: PartitionState(-1, 1, [1], 1)}, "broker change", 0.01)
    obs.txn(0.002, True)
    obs.txn(0.003, False)
    s = parse(generate_latest(reg).decode())
    assert total(s, "tidelog_controller_leader_elections_total", type="clean") == 1
    assert total(s, "tidelog_controller_leader_elections_total", type="unclean") == 0
    assert total(s, "tidelog_controller_offline_partitions_count") == 1
    assert total(s, "tidelog_controller_global_partition_count") == 3
    assert total(s, "tidelog_controller_active_controller_count") == 1
    assert total(s, "tidelog_controller_epoch") == 7
    assert total(s, "tidelog_controller_etcd_txn_time_seconds_count") == 2
    assert total(s, "tidelog_controller_etcd_txn_failures_total") == 1
    epoch[0] = 0
    s = parse(generate_latest(reg).decode())
    assert total(s, "tidelog_controller_active_controller_count") == 0
    assert total(s, "tidelog_controller_offline_partitions_count") == 0
