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
from shared.errors import ErrorCode, TidelogError
from tests.conftest import Cluster, kill_cluster, start_cluster, wait_for
from tests.integration.quota_load import BrokerUsage, ConsumeLoad, ProduceLoad

MB = 1_048_576
PRODUCE, FETCH, REQUEST = 0, 1, 2
WINDOW_S = 20
# Brokers here lead partitions no other broker could take: skip the controlled shutdown's wait at teardown.
FAST_STOP = {"TIDELOG_CONTROLLED_SHUTDOWN_ENABLE": "false"}


def alter(admin: Admin, entity: dict[str, Any], **values: float | None) -> None:
    ops = [{"key": k, "remove": True} if v is None else {"key": k, "value": v} for k, v in values.items()]
    admin.alter_client_quotas([{"entity": entity, "ops": ops}])


@pytest.fixture(scope="module")
def one_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str, Admin, BrokerUsage]]:
    c = start_cluster(str(tmp_path_factory.mktemp("quotas")), brokers=1, controllers=1, coordinators=0, cleaners=0,
                      quotas=2, extra_env=FAST_STOP)
    bootstrap = ",".join(p.address for p in c.procs("broker"))
    admin = Admin(bootstrap)
    yield c, bootstrap, admin, BrokerUsage([p.address for p in c.procs("quota")])
    admin.close()
    kill_cluster(c)


def test_byte_rate_and_request_quotas_are_held_on_the_broker(one_broker: Any) -> None:
    c, bootstrap, admin, usage = one_broker
    for topic in ("fill", "prod", "req"):
        admin.create_topic(topic, 1, 1)
    with Producer(bootstrap, client_id="filler") as p:  # data for the consumer, before any quota
        for _ in range(24_000):
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


def test_a_quota_changed_at_runtime_applies_within_a_second(one_broker: Any) -> None:
    c, bootstrap, admin, usage = one_broker
    _check_admin_api(admin)
    alter(admin, {"client-id": "rt-new"}, producer_byte_rate=MB)  # for a new client id, at the end
    admin.create_topic("rt", 1, 1)
    load = ProduceLoad(bootstrap, "rt", "rt")
    load.start()
    try:
        wait_for(lambda: usage.totals(PRODUCE).get("rt", 0) > 2 * MB, 10, what="rt producing")
        assert load.producer.throttled_responses == 0
        alter(admin, {"client-id": "rt"}, producer_byte_rate=MB)
        t0 = time.monotonic()
        wait_for(lambda: load.producer.throttled_responses > 0, 2, interval=0.01, what="first throttled response")
        assert time.monotonic() - t0 < 1.0
        # Held at the quota: throttled responses come every few ms once the overshoot of the seconds before
        # the change is paid for. That first throttle is as long as the overshoot (capped at the quota
        # window, 11 s): the faster the machine produced before the change, the longer (a fast CI run
        # saw under 21 throttled responses in 5 s).
        wait_for(lambda: load.producer.throttled_responses > 20, 15, what="held at the quota")
        base = usage.totals(PRODUCE)["rt"]
        alter(admin, {"client-id": "rt"}, producer_byte_rate=None)
        t1 = time.monotonic()
        # At 1 MB/s, 2 MB would take 2 s: seeing them within 1 s of the removal (plus one report) means
        # full speed came back within the second.
        wait_for(lambda: usage.totals(PRODUCE)["rt"] - base >= 2 * MB, 3, interval=0.02, what="full speed again")
        assert time.monotonic() - t1 < 1.2
    finally:
        load.stop()
    assert not load.errors
    # A new client id is held from its first request (the broker's provisional decision), not from
    # the quota service's first answer ~100 ms later: one 0.9 MB request against 1 MB/s is throttled.
    with Producer(bootstrap, client_id="rt-new", batch_size=2 * MB, linger_ms=200) as p:
        for _ in range(900):
            p.send("rt", b"n" * 1000)
        p.flush()
        assert p.throttled_responses >= 1 and p.throttle_time_ms_max >= 300, p.throttle_time_ms_max


def test_killing_the_quota_service_fails_open_a_restart_throttles_again_and_a_standby_takes_over(
        one_broker: Any) -> None:
    c, bootstrap, admin, usage = one_broker
    admin.create_topic("kt", 1, 1)
    alter(admin, {"client-id": "k"}, producer_byte_rate=MB)
    load = ProduceLoad(bootstrap, "k", "kt")
    load.start()
    try:
        wait_for(lambda: load.producer.throttled_responses > 5, 10, what="k throttled")
        broker_log = c.procs("broker")[0].log_path
        log_start = os.path.getsize(broker_log)
        for proc in c.procs("quota"):  # every instance: the service is gone
            os.kill(proc.pid, signal.SIGKILL)
        samples: list[tuple[float, int]] = []

        def unthrottled() -> bool:  # > 3 MB/s over the last second, counted by the producer
            samples.append((time.monotonic(), load.sent))
            old = [s for s in samples if s[0] <= samples[-1][0] - 1.0]
            return bool(old) and (samples[-1][1] - old[-1][1]) * 1000 > 3 * MB
        wait_for(unthrottled, 10, what="produce unthrottled without the quota service")
        with open(broker_log) as f:
            f.seek(log_start)
            assert f.read().count("quota service unreachable") == 1  # said once, however long it lasts
        # Unthrottled meanwhile, the client is far over its quota: the first decision of the restarted
        # instance may hold it for up to a window (11 s), so one throttled response is the sign.
        before = load.producer.throttled_responses
        c.restart("quota", 1)
        wait_for(lambda: load.producer.throttled_responses > before, 20, what="throttled again after restart")
        # With a standby running, killing the active instance hands the work over (after its lease ends).
        c.restart("quota", 2)
        assert usage.active_instance() == "1"
        os.kill(c.proc("quota", 1).pid, signal.SIGKILL)
        wait_for(lambda: usage.active_instance() == "2", 15, what="the standby active")
        before = load.producer.throttled_responses
        wait_for(lambda: load.producer.throttled_responses > before, 10, what="throttled by the new instance")
    finally:
        load.stop()
    assert not load.errors


def test_a_cluster_wide_quota_holds_the_sum_over_three_brokers(make_cluster: Any) -> None:
    c = make_cluster(brokers=3, controllers=1, coordinators=0, cleaners=0, extra_env=FAST_STOP)
    bootstrap = ",".join(p.address for p in c.procs("broker"))
    usage = BrokerUsage([p.address for p in c.procs("quota")])
    with Admin(bootstrap) as admin:
        admin.create_topic("cw", 3, 1)  # one partition led by each broker
        alter(admin, {"client-id": "cw"}, producer_byte_rate=MB, cluster_wide=1)
        alter(admin, {"client-id": "pb"}, producer_byte_rate=MB)  # per broker: 1 MB/s on each
    loads = [ProduceLoad(bootstrap, "cw", "cw", partitions=3), ProduceLoad(bootstrap, "pb", "cw", partitions=3)]
    try:
        before, t0 = usage.totals(PRODUCE), time.monotonic()
        for load in loads:
            load.start()
        time.sleep(WINDOW_S)  # the measurement window
        after, elapsed = usage.totals(PRODUCE), time.monotonic() - t0
        rates = {k: (after[k] - before.get(k, 0.0)) / elapsed for k in ("cw", "pb")}
        print(f"measured on the brokers: {rates}, cw per broker {usage.per_broker(PRODUCE, 'cw')}")
        assert rates["cw"] == pytest.approx(MB, rel=0.10)
        assert len(usage.per_broker(PRODUCE, "cw")) == 3
        # what per-broker quotas allow: up to 3x, as fast as the load thread can send (it measured 2.39x and
        # 1.87x on a slow machine sharing its cores with another test module); 1.5x the cluster-wide quota's
        # rate is a contrast no cluster-wide quota held within 10 % allows
        assert rates["pb"] > 1.5 * MB
    finally:
        for load in loads:
            load.stop()
    assert not any(load.errors for load in loads)


def _check_admin_api(admin: Admin) -> None:
    """Describe with filters, validate-only and refused input over REST (the entries of the first test)."""
    both = admin.describe_client_quotas(client_id="p-slow")
    assert [e["entity"] for e in both] == [{"client-id": "p-slow"}, {"user": "ANONYMOUS", "client-id": "p-slow"}]
    assert [e["entity"] for e in admin.describe_client_quotas(client_id="p-slow", strict=True)] == [{"client-id": "p-slow"}]
    assert admin.describe_client_quotas(client_id="<default>")[0]["values"] == {"consumer_byte_rate": MB}
    checked = admin.alter_client_quotas([{"entity": {"client-id": "x"}, "ops": [{"key": "producer_byte_rate", "value": 5}]}],
                                        validate_only=True)
    assert checked[0]["values"] == {"producer_byte_rate": 5} and not admin.describe_client_quotas(client_id="x")
    for bad in ({"entity": {"client-id": "x"}, "ops": [{"key": "producer_byte_rate", "value": -1}]},
                {"entity": {"topic": "x"}, "ops": [{"key": "producer_byte_rate", "value": 1}]},
                {"entity": {"client-id": "x"}, "ops": [{"key": "nope", "value": 1}]}):
        with pytest.raises(TidelogError) as err:
            admin.alter_client_quotas([bad])
        assert err.value.code == ErrorCode.INVALID_REQUEST
