"""Replication throttles for a reassignment, set and removed as ``kafka-reassign-partitions.sh`` does.

``--throttle RATE`` on execute: every broker taking part (existing and new replicas) gets
``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` = RATE bytes/s; every
topic with moving partitions gets ``leader.replication.throttled.replicas`` = the moving partitions'
existing replicas (they send) and ``follower.replication.throttled.replicas`` = the replicas being
added (they receive), as ``partition:broker`` lists. ``verify`` removes all four once the plan is done.

Goes through the controller's REST admin API (``PATCH /v1/brokers/{id}/configs`` and
``PATCH /v1/topics/{name}/configs``). ``target`` is the REST base URL, or a client with ``rest_url``
(``shared.client.Admin``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"

#: (topic, partition) -> (brokers being added, existing brokers)
Moving = Mapping[tuple[str, int], tuple[Iterable[int], Iterable[int]]]


def _url(target: Any) -> str:
    url = target if isinstance(target, str) else getattr(target, "rest_url", None)
    if not url:
        raise ValueError("give the controller's REST URL or a client with rest_url")
    return str(url).rstrip("/")


def _patch(url: str, path: str, configs: dict[str, Any], timeout: float) -> None:
    from shared.cli.connect import http_request  # the CLI's REST credentials (the controller imports this module)

    resp = http_request("PATCH", url + path, json={"configs": configs}, timeout=timeout)
    if resp.status_code >= 400:
        try:
            body = resp.json()
            why = f"{body.get('error')}: {body.get('message')}"
        except ValueError:
            why = resp.text
        raise RuntimeError(f"PATCH {path} failed ({resp.status_code}) {why}")


def throttle_plan(moving: Moving) -> tuple[set[int], dict[str, dict[str, str]]]:
    """The brokers to rate-limit and, per topic, the two throttled-replicas values. Pure."""
    brokers: set[int] = set()
    leaders: dict[str, set[tuple[int, int]]] = {}
    followers: dict[str, set[tuple[int, int]]] = {}
    for (topic, partition), (adding, existing) in moving.items():
        adding, existing = set(adding), set(existing)
        brokers |= adding | existing
        leaders.setdefault(topic, set()).update((partition, b) for b in existing)
        followers.setdefault(topic, set()).update((partition, b) for b in adding - existing)
    topics = {}
    for topic in sorted(set(leaders) | set(followers)):
        topics[topic] = {
            LEADER_REPLICAS: ",".join(f"{p}:{b}" for p, b in sorted(leaders.get(topic, set()))),
            FOLLOWER_REPLICAS: ",".join(f"{p}:{b}" for p, b in sorted(followers.get(topic, set()))),
        }
    return brokers, topics


def set_reassignment_throttle(target: Any, rate: int, moving: Moving, *, timeout: float = 30.0) -> dict[str, Any]:
    """Set the four throttle configs for ``moving`` at ``rate`` bytes/s; returns what was set."""
    if rate < 0:
        raise ValueError("the throttle must be >= 0 bytes/s")
    url = _url(target)
    brokers, topics = throttle_plan(moving)
    for b in sorted(brokers):
        _patch(url, f"/v1/brokers/{b}/configs", {LEADER_RATE: int(rate), FOLLOWER_RATE: int(rate)}, timeout)
    for topic, configs in topics.items():
        _patch(url, f"/v1/topics/{topic}/configs", configs, timeout)
    return {"brokers": sorted(brokers), "rate": int(rate), "topics": topics}


def clear_reassignment_throttle(target: Any, brokers: Iterable[int], topics: Iterable[str], *,
                                timeout: float = 30.0) -> None:
    """Remove the throttle rates from ``brokers`` and the throttled-replicas lists from ``topics``
    (what ``verify`` does once a reassignment is done)."""
    url = _url(target)
    for b in sorted(set(brokers)):
        _patch(url, f"/v1/brokers/{b}/configs", {LEADER_RATE: None, FOLLOWER_RATE: None}, timeout)
    for topic in sorted(set(topics)):
        _patch(url, f"/v1/topics/{topic}/configs", {LEADER_REPLICAS: None, FOLLOWER_REPLICAS: None}, timeout)
