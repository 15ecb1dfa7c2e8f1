"""The consumer never holds its lock across a network call: ``_pump`` (run with the lock held by the
fetcher, by every fetch response and by ``poll()``) only notes what is missing, and the fetcher thread
dials brokers and refreshes metadata between two turns holding the lock."""

from __future__ import annotations

import pytest

from shared.client import Consumer, TopicPartition
from shared.client import cluster as cluster_module
from shared.client import consumer as consumer_module
from shared.client.cluster import PartitionInfo, Snapshot
from tests.conftest import wait_for

TP = TopicPartition("t", 0)


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch):
    c = Consumer("127.0.0.1:1")  # nothing listens there; nothing may dial it with the lock held
    calls: list[tuple[str, bool]] = []

    def network(name: str):
        def call(*_args: object, **_kw: object) -> None:
            calls.append((name, c._lock._is_owned()))  # Condition over a Lock: held by anyone
            return None
        return call

    monkeypatch.setattr(cluster_module, "tcp_reachable", network("tcp probe"))
    monkeypatch.setattr(consumer_module, "tcp_reachable", network("tcp probe"))
    monkeypatch.setattr(c.cluster, "refresh", network("Metadata"))
    monkeypatch.setattr(c.cluster, "partitions_for", network("Metadata"))
    c.cluster.snapshot = Snapshot(brokers={1: "127.0.0.1:1"},
                                  topics={"t": {0: PartitionInfo(1, 0, [1], [1], 0)}})
    st = consumer_module.PartitionState()
    st.position = st.fetch_position = 0
    c._states = {TP: st}
    yield c, calls
    c._closed = True
    c.cluster.close()


def test_pump_makes_no_network_call_and_notes_the_leader_to_dial(consumer) -> None:
    c, calls = consumer
    with c._lock:
        c._pump()
    assert calls == []
    assert c._wanted_leaders == {1} and not c._streams


def test_pump_asks_for_metadata_it_does_not_have_instead_of_fetching_it(consumer) -> None:
    c, calls = consumer
    c.cluster.snapshot = Snapshot(brokers={1: "127.0.0.1:1"})
    with c._lock:
        c._pump()
    assert calls == [] and c._metadata_wanted


def test_the_fetcher_dials_and_refreshes_without_the_lock(consumer) -> None:
    c, calls = consumer
    c.cluster.snapshot = Snapshot(brokers={1: "127.0.0.1:1"})
    c._ensure_fetcher()  # the probe fails (None): it asks for metadata, which it refreshes unlocked
    wait_for(lambda: ("Metadata", False) in calls or any(held for _, held in calls), 5, interval=0.01,
             what="the fetcher's metadata refresh")
    assert calls and all(not held for _, held in calls), calls
    assert ("Metadata", False) in calls
