"""Quota entities, validation and Kafka's eight precedence levels."""

from __future__ import annotations

import pytest

from shared.quota.entities import (
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaConfigError,
    QuotaEntity,
    apply_ops,
    candidates,
    resolve,
    validate_value,
)

U, C = "alice", "app-1"
LEVELS = [
    (QuotaEntity(U, C), (U, C)),
    (QuotaEntity(U, DEFAULT), (U, C)),
    (QuotaEntity(U, None), (U, "")),
    (QuotaEntity(DEFAULT, C), (U, C)),
    (QuotaEntity(DEFAULT, DEFAULT), (U, C)),
    (QuotaEntity(DEFAULT, None), (U, "")),
    (QuotaEntity(None, C), ("", C)),
    (QuotaEntity(None, DEFAULT), ("", C)),
]


def test_candidates_are_kafkas_eight_levels_in_order() -> None:
    assert candidates(U, C) == [e for e, _ in LEVELS]


@pytest.mark.parametrize("level", range(1, 9))
def test_each_level_wins_over_every_less_specific_one(level: int) -> None:
    # Entries at this level and every level below it; the most specific present one must win.
    configs = {e: {PRODUCER_BYTE_RATE: float(1000 * (i + 1))} for i, (e, _) in enumerate(LEVELS) if i + 1 >= level}
    m = resolve(configs, U, C, PRODUCER_BYTE_RATE)
    assert m is not None
    assert (m.level, m.entity, m.value, m.group) == (level, LEVELS[level - 1][0], 1000.0 * level, LEVELS[level - 1][1])


def test_keys_resolve_separately_and_other_clients_do_not_match() -> None:
    configs = {QuotaEntity(U, C): {PRODUCER_BYTE_RATE: 10.0}, QuotaEntity(None, DEFAULT): {REQUEST_PERCENTAGE: 50.0}}
    m = resolve(configs, U, C, REQUEST_PERCENTAGE)
    assert m is not None and m.level == 8 and m.value == 50.0
    assert resolve(configs, "bob", C, PRODUCER_BYTE_RATE) is None
    assert resolve(configs, U, "", PRODUCER_BYTE_RATE) is None  # an empty client id matches no client-id level


def test_entity_paths_and_dicts_round_trip() -> None:
    for e, _ in LEVELS + [(QuotaEntity("we/ird %name", None), None)]:
        assert QuotaEntity.from_path(e.path()) == e
        assert QuotaEntity.from_dict(e.as_dict()) == e
    assert QuotaEntity(None, DEFAULT).as_dict() == {"client-id": None}


@pytest.mark.parametrize("bad", [{}, {"topic": "x"}, {"user": ""}])
def test_bad_entities_are_refused(bad: dict[str, str]) -> None:
    with pytest.raises(QuotaConfigError):
        QuotaEntity.from_dict(bad)


@pytest.mark.parametrize(("key", "value"), [
    ("producer_byte_rate", 0), ("producer_byte_rate", -5), ("producer_byte_rate", 1.5),
    ("consumer_byte_rate", float("nan")), ("request_percentage", 0), ("cluster_wide", 2), ("nope", 1),
    ("producer_byte_rate", "abc"),
])
def test_bad_values_are_refused(key: str, value: object) -> None:
    with pytest.raises(QuotaConfigError):
        validate_value(key, value)  # type: ignore[arg-type]


def test_alter_ops_set_and_remove() -> None:
    cur = {PRODUCER_BYTE_RATE: 1.0, REQUEST_PERCENTAGE: 20.0}
    assert apply_ops(cur, [(PRODUCER_BYTE_RATE, 2048), (REQUEST_PERCENTAGE, None)]) == {PRODUCER_BYTE_RATE: 2048.0}
    with pytest.raises(QuotaConfigError):
        apply_ops(cur, [("bogus", None)])
