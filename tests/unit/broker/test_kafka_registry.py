"""The Kafka door's API table (services/broker/kafka/registry.py): a version without a Kafka definition is
refused when it is registered, without loading any message class; ``load_schemas`` (what the fork server
runs before forking brokers) loads the classes of every served version."""

from __future__ import annotations

import pytest

from services.broker.kafka.apis import KafkaApis
from services.broker.kafka.registry import load_schemas, register_all
from shared.kafka import messages
from shared.kafka.messages import defined, known_versions


async def _handler(*_: object) -> tuple[None, int]:
    return None, 0


def table() -> KafkaApis:
    apis = KafkaApis(None, None)  # type: ignore[arg-type]  # only the table
    register_all(apis)
    return apis


def test_a_version_kafka_does_not_define_is_refused_at_registration() -> None:
    apis = KafkaApis(None, None)  # type: ignore[arg-type]
    lo, hi = known_versions(0) or (0, 0)
    with pytest.raises(ValueError, match=rf"api key 0: no Kafka definition of versions \[{hi + 1}\]"):
        apis.register(0, (lo, hi + 1), _handler)
    with pytest.raises(ValueError, match="api key 32767"):
        apis.register(32767, (0, 0), _handler)
    assert not defined(32767, 0) and defined(0, hi) and not defined(0, hi + 1)
    apis.register(0, (lo, hi), _handler)
    assert apis.versions[0] == (lo, hi)


def test_registration_loads_no_message_class_and_load_schemas_loads_every_served_version() -> None:
    messages.api.cache_clear()
    apis = table()
    assert messages.api.cache_info().currsize == 0  # classes load on first use, not at start
    served = sum(hi - lo + 1 for lo, hi in apis.versions.values())
    assert served > 100
    assert load_schemas() == served
    assert messages.api.cache_info().currsize == served
    for key, (_lo, hi) in apis.versions.items():
        assert messages.api(key, hi).key == key
