"""Rack-aware group assignment through the group state machine (KIP-881): members' rack_id and the
shard's partition racks (from services/coordinator/cluster_view.py) reach the assignor."""

from __future__ import annotations

from services.coordinator.config import GroupConfig
from services.coordinator.membership import HeartbeatRequest
from services.coordinator.shard import GroupShard
from shared.types import TopicPartition


def test_shard_gives_members_partitions_of_their_rack() -> None:
    racks_of = {TopicPartition("t", p): frozenset({"abc"[p % 3]}) for p in range(6)}
    ids = iter(f"member-{i}" for i in range(10))
    shard = GroupShard(0, GroupConfig(session_timeout_ms=10_000, heartbeat_interval_ms=1000), new_member_id=lambda: next(ids))
    shard.set_topics({"t": ("00000000000000000000000000000001", 6)}, racks_of)
    epochs: dict[str, int] = {}
    owned: dict[str, set[TopicPartition]] = {}
    racks = {}
    for rack in ("c", "a", "b"):
        res, _ = shard.heartbeat(HeartbeatRequest("g", "", 0, None, rack, 5000, ["t"]), 0)
        epochs[res.member_id], racks[res.member_id] = res.member_epoch, rack
    for _ in range(6):
        for mid in list(epochs):
            res, _ = shard.heartbeat(HeartbeatRequest("g", mid, epochs[mid], None, racks[mid], 5000, ["t"],
                                                      owned=owned.get(mid, set())), 0)
            epochs[mid] = res.member_epoch
            if res.assignment is not None:
                owned[mid] = set(res.assignment)
    assert {mid: {racks[mid]} for mid in owned} == {mid: {"abc"[tp.partition % 3] for tp in tps}
                                                   for mid, tps in owned.items()}
    assert sorted(len(v) for v in owned.values()) == [2, 2, 2]
