"""The throttle settings `reassign --throttle` makes (shared/cli/throttle.py), as kafka-reassign-partitions.sh:
existing replicas throttled as leaders, added replicas as followers, rates on every broker involved."""

from __future__ import annotations

import pytest

from shared.cli.throttle import FOLLOWER_REPLICAS, LEADER_REPLICAS, set_reassignment_throttle, throttle_plan


def test_plan_names_existing_as_leaders_and_added_as_followers() -> None:
    brokers, topics = throttle_plan({
        ("a", 0): ([4], [1, 2, 3]),
        ("a", 1): ([4, 5], [2, 3]),
        ("b", 0): ([5], [1]),
    })
    assert brokers == {1, 2, 3, 4, 5}
    assert topics == {
        "a": {LEADER_REPLICAS: "0:1,0:2,0:3,1:2,1:3", FOLLOWER_REPLICAS: "0:4,1:4,1:5"},
        "b": {LEADER_REPLICAS: "0:1", FOLLOWER_REPLICAS: "0:5"},
    }


def test_a_broker_kept_is_not_a_throttled_follower() -> None:
    _, topics = throttle_plan({("a", 0): ([1, 4], [1, 2])})  # target [1,4] written as adding incl. a kept one
    assert topics["a"][FOLLOWER_REPLICAS] == "0:4"


def test_refuses_negative_rate_and_missing_target() -> None:
    with pytest.raises(ValueError):
        set_reassignment_throttle("http://x", -1, {})
    with pytest.raises(ValueError):
        set_reassignment_throttle(object(), 5, {})
