"""The admin side of quotas: kafka-configs style entity arguments and DescribeClientQuotas filters."""

from __future__ import annotations

import click
import pytest

from services.controller.quota_configs import EntityFilter
from shared.cli.quotas import parse_entity
from shared.quota.entities import DEFAULT, QuotaEntity


def test_entity_arguments_pair_in_order() -> None:
    args = ["--entity-type", "users", "--entity-default", "--entity-type", "clients", "--entity-name", "app", "-x"]
    assert parse_entity(args) == ({"user": DEFAULT, "client-id": "app"}, ["-x"])
    assert parse_entity(["--entity-type", "clients"]) == ({"client-id": None}, [])


@pytest.mark.parametrize("args", [
    ["--entity-name", "a"],
    ["--entity-type", "topics"],
    ["--entity-type", "users", "--entity-name", "a", "--entity-default"],
    ["--entity-type", "users", "--entity-type", "users"],
])
def test_bad_entity_arguments(args: list[str]) -> None:
    with pytest.raises(click.BadParameter):
        parse_entity(args)


def test_filters_match_as_kafkas_describe() -> None:
    entities = [QuotaEntity("u", None), QuotaEntity("u", "c"), QuotaEntity(None, "c"), QuotaEntity(None, DEFAULT)]
    assert [e for e in entities if EntityFilter(user="u").matches(e)] == entities[:2]
    assert [e for e in entities if EntityFilter(user="u", strict=True).matches(e)] == entities[:1]
    assert [e for e in entities if EntityFilter(client_id=DEFAULT).matches(e)] == entities[3:]
    assert [e for e in entities if EntityFilter().matches(e)] == entities
