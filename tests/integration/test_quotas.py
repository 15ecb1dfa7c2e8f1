"""Client quotas on real clusters: byte-rate and request quotas held on the broker, precedence end to end,
runtime changes, cluster-wide quotas across 3 brokers, and the quota service killed with -9.

Rates are measured on the brokers (the usage they count and report to the quota service) over 20 s
windows; producer and consumer quotas share one window to keep the suite short.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from shared.client import Admin, Producer
from tests.conftest import Cluster, start_cluster, wait_for
from tests.integration.quota_load import BrokerUsage, ConsumeLoad, ProduceLoad

MB = 1_048_576
PRODUCE, FETCH, REQUEST = 0, 1, 2
WINDOW_S = 20


def alter(admin: Admin, entity: dict[str, Any], **values: float | None) -> None:
    ops = [{"key": k, "remove": True} if v is None else {"key": k, "value": v} for k, v in values.items()]
    admin.alter_client_quotas([{"entity": entity, "ops": ops}])


@pytest.fixture(scope="module")
def one_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str, Admin, BrokerUsage]]:
    c = start_cluster(str(tmp_path_factory.mktemp("quotas")), brokers=1, controllers=1, coordinators=0, cleaners=0)
    bootstrap = ",".join(p.address for p in c.procs("broker"))
    admin = Admin(bootstrap)
    yield c, bootstrap, admin, BrokerUsage([p.address for p in c.procs("quota")])
    admin.close()
    c.lc.stop()


def test_byte_rate_and_request_quotas_are_held_on_the_broker(one_broker: Any) -> None:
    c, bootstrap, admin, usage = one_broker
    for topic in ("fill", "prod", "req"):
        admin.create_topic(topic, 1, 1)
    with Producer(bootstrap, client_id="filler") as p:  # data for the consumer, before any quota
        for _ in range(30_000):
            p.send("fill", b"f" * 1000)
    # Two precedence levels end to end: user+client-id (level 1) beats client-id (level 7) for the
    # producer; <default> client-id (level 8) gives the consumer its quota. Set with the CLI.
    cli = [sys.executable, "-m", "shared.cli.main", "quotas", "alter", "--rest", c.rest]
    subprocess.run([*cli, "--entity-type", "users", "--entity-name", "ANONYMOUS", "--entity-type", "clients",
                    "--entity-name", "p-slow", "--add", f"producer_byte_rate={MB}"], check=True, capture_output=True)
    subprocess.run([*cli, "--entity-type", "clients", "--entity-name", "p-slow", "--add",
                    f"producer_byte_rate={4 * MB}"], check=True, capture_output=True)
    subprocess.run([*cli, "--entity-type", "clients", "--entity-default", "--add", f"consumer_byte_rate={MB}"],
                   check=True, capture_output=True)
    alter(admin, {"client-id": "r-slow"}, request_percentage=1.0)
    eff = admin.effective_client_quotas("ANONYMOUS", "p-slow")["quotas"]
    assert (eff["producer_byte_rate"]["level"], eff["producer_byte_rate"]["value"]) == (1, MB)
    assert eff["consumer_byte_rate"]["level"] == 8

    producer = ProduceLoad(bootstrap, "p-slow", "prod")
    consumer = ConsumeLoad(bootstrap, "c-slow", "fill")
    requests = ProduceLoad(bootstrap, "r-slow", "req", batch_size=1100, linger_ms=0, max_in_flight_requests_per_connection=1)
    loads = [producer, consumer, requests]
    try:
        # The window starts with the clients: the first burst (before the first decision) counts too.
        produced, fetched, handler = _measure_all(usage, start=loads)
        print(f"measured on the broker: produce {produced}, fetch {fetched}, handler % {handler}")
        assert producer.producer.throttled_responses and consumer.consumer.throttled_responses
        assert requests.producer.throttled_responses
        assert produced["p-slow"] == pytest.approx(MB, rel=0.10), produced
        assert fetched["c-slow"] == pytest.approx(MB, rel=0.10), fetched
        # request_percentage 1: at most 1 % of the handler's time (percent-seconds per second).
        assert handler["r-slow"] <= 1.0 * 1.10, handler
    finally:
        for load in loads:
            load.stop()
    assert not producer.errors and not requests.errors


def _measure_all(usage: BrokerUsage, start: list[Any]) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """All three rates over one window, which begins as the ``start`` loads start."""
    before = [usage.totals(t) for t in (PRODUCE, FETCH, REQUEST)]
    t0 = time.monotonic()
    for load in start:
        load.start()
    time.sleep(WINDOW_S)  # the measurement window
    after = [usage.totals(t) for t in (PRODUCE, FETCH, REQUEST)]
    elapsed = time.monotonic() - t0
    return tuple({c: (v - b.get(c, 0.0)) / elapsed for c, v in a.items()}  # type: ignore[return-value]
                 for a, b in zip(after, before))
