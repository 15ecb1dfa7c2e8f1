"""Replica assignment for new topics and partitions: pure functions, randomness injected.

Kafka's algorithm (the Definitive Guide, chapter 5): leaders round-robin over
the brokers from a random start; followers at increasing offsets from the
leader (with a shift that grows every full round, so replicas spread); with
racks, the broker list is first arranged rack-alternating and each partition's
replicas are placed on distinct racks while possible.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from shared.errors import InvalidPartitionsError, InvalidReplicationFactorError


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def rack_alternating(brokers: Mapping[int, str | None]) -> list[int]:
    """Brokers ordered so that consecutive brokers sit on different racks: 0,3,1,4,2,5 for racks a,a,a,b,b,b."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(brokers):
        by_rack.setdefault(brokers[b] or "", []).append(b)
    racks = sorted(by_rack)
    out: list[int] = []
    i = 0
    while len(out) < len(brokers):
        for r in racks:
            if i < len(by_rack[r]):
                out.append(by_rack[r][i])
        i += 1
    return out


def assign_replicas(
    brokers: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    *,
    first_partition: int = 0,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """``{partition: [leader, follower, ...]}`` for partitions ``first_partition..+partitions``."""
    if partitions <= 0:
        raise InvalidPartitionsError("number of partitions must be at least 1")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("replication factor must be at least 1")
    n = len(brokers)
    if replication_factor > n:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the {n} available brokers"
        )
    rng = rng or random.Random()
    racked = all(brokers[b] for b in brokers) and len({brokers[b] for b in brokers}) > 1
    if racked:
        return _assign_rack_aware(brokers, partitions, replication_factor, first_partition, rng)
    ids = sorted(brokers)
    start = rng.randrange(n)
    shift = rng.randrange(n)
    out: dict[int, list[int]] = {}
    for i in range(partitions):
        p = first_partition + i
        if i > 0 and i % n == 0:
            shift += 1
        first = (i + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[_replica_index(first, shift, j, n)])
        out[p] = replicas
    return out


def _assign_rack_aware(
    brokers: Mapping[int, str | None], partitions: int, rf: int, first_partition: int, rng: random.Random
) -> dict[int, list[int]]:
    ordered = rack_alternating(brokers)
    n = len(ordered)
    num_racks = len({brokers[b] for b in brokers})
    start = rng.randrange(n)
    shift = rng.randrange(n)
    out: dict[int, list[int]] = {}
    for i in range(partitions):
        if i > 0 and i % n == 0:
            shift += 1
        first = (i + start) % n
        leader = ordered[first]
        replicas = [leader]
        racks_used = {brokers[leader]}
        brokers_used = {leader}
        k = 0
        while len(replicas) < rf:
            b = ordered[_replica_index(first, shift, k, n)]
            k += 1
            rack = brokers[b]
            if b in brokers_used:
                continue
            # Skip a broker whose rack already holds a replica, until every rack has one.
            if rack in racks_used and len(racks_used) < num_racks and k <= 2 * n:
                continue
            replicas.append(b)
            racks_used.add(rack)
            brokers_used.add(b)
            if len(racks_used) == num_racks:
                racks_used = set()
        out[first_partition + i] = replicas
    return out
