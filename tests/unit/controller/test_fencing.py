"""Fencing of internal requests: broker epoch (incarnation), leader epoch, partition epoch."""

from __future__ import annotations

import pytest

from services.controller.partitions import alter_partition, check_broker_epoch
from shared.errors import ErrorCode, TidelogError
from shared.metadata.types import PartitionState

REG = {"id": 1, "address": "127.0.0.1:1", "incarnation": "1700-abc"}


def test_broker_epoch_must_match_the_live_registration() -> None:
    check_broker_epoch(REG, 1, "1700-abc")
    for reg, inc in ((REG, "bogus"), (REG, ""), (None, "1700-abc"), ({"id": 1}, "")):
        with pytest.raises(TidelogError) as err:
            check_broker_epoch(reg, 1, inc)
        assert err.value.code == ErrorCode.STALE_BROKER_EPOCH


def test_alter_partition_needs_the_leader_at_its_leader_and_partition_epochs() -> None:
    st = PartitionState(leader=1, leader_epoch=4, isr=[1, 2, 3], partition_epoch=9)
    replicas, live = [1, 2, 3], {1, 2, 3}
    cases = [
        (2, 4, 9, ErrorCode.FENCED_LEADER_EPOCH),  # not the leader
        (1, 3, 9, ErrorCode.FENCED_LEADER_EPOCH),  # stale leader epoch
        (1, 5, 9, ErrorCode.FENCED_LEADER_EPOCH),  # future leader epoch
        (1, 4, 8, ErrorCode.INVALID_UPDATE_VERSION),  # stale partition epoch
    ]
    for broker, le, pe, code in cases:
        with pytest.raises(TidelogError) as err:
            alter_partition(st, replicas, broker, le, pe, [1, 2], live)
        assert err.value.code == code, (broker, le, pe)
    new = alter_partition(st, replicas, 1, 4, 9, [2, 1], live)
    assert (new.isr, new.partition_epoch, new.leader_epoch) == ([1, 2], 10, 4)
