"""How coordinator instances share the __consumer_offsets partitions."""

from __future__ import annotations

from services.coordinator.ownership import plan


def owners(**by: list[int]) -> dict[int, dict[str, str]]:
    return {p: {"owner": who} for who, ps in by.items() for p in ps}


def test_alone_claims_everything_unowned() -> None:
    assert plan(4, ["1"], {}, "1") == ([0, 1, 2, 3], [])


def test_a_new_instance_gets_its_share_after_the_other_releases_it() -> None:
    current = owners(**{"1": [0, 1, 2, 3]})
    assert plan(4, ["1", "2"], current, "1") == ([], [1, 3])
    assert plan(4, ["1", "2"], current, "2") == ([], [])  # waits for the keys to go
    assert plan(4, ["1", "2"], owners(**{"1": [0, 2]}), "2") == ([1, 3], [])


def test_partitions_of_a_dead_instance_are_claimed_once_its_keys_expire() -> None:
    assert plan(4, ["2"], owners(**{"2": [1, 3]}), "2") == ([0, 2], [])


def test_an_instance_missing_from_the_live_list_releases_everything() -> None:
    assert plan(4, ["2"], owners(**{"1": [0, 2]}), "1") == ([], [0, 2])
