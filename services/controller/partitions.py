"""Partition leadership and ISR decisions of the controller. Pure functions.

Each function takes the current topics, partition states and live brokers
and returns only the partition states that must change. Every leader change
bumps the leader epoch; every change bumps the partition epoch. The adapter
(``replication.py``) applies them in fenced etcd transactions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from shared.errors import AlterPartitionError, ErrorCode, StaleBrokerEpochError, TidelogError
from shared.metadata.types import PartitionState, TopicRecord
from shared.types import TopicPartition

States = Mapping[TopicPartition, PartitionState]
Topics = Mapping[str, TopicRecord]


def _replicas(topics: Topics, tp: TopicPartition) -> list[int]:
    t = topics.get(tp.topic)
    return t.assignment.get(tp.partition, []) if t else []


def on_brokers_changed(
    topics: Topics, states: States, live: set[int], unclean: Callable[[str], bool]
) -> dict[TopicPartition, PartitionState]:
    """Elect new leaders for partitions whose leader is gone; drop dead brokers from ISRs;
    bring offline partitions back when an ISR member (or, if unclean election is
    allowed, any replica) returns."""
    out: dict[TopicPartition, PartitionState] = {}
    for tp, st in states.items():
        replicas = _replicas(topics, tp)
        if not replicas:
            continue
        isr_live = [b for b in st.isr if b in live]
        if st.leader in live:
            if len(isr_live) != len(st.isr):
                out[tp] = PartitionState(st.leader, st.leader_epoch, isr_live, st.partition_epoch + 1)
            continue
        candidates = [r for r in replicas if r in isr_live]
        if candidates:
            out[tp] = PartitionState(candidates[0], st.leader_epoch + 1, isr_live, st.partition_epoch + 1)
            continue
        live_replicas = [r for r in replicas if r in live]
        if live_replicas and unclean(tp.topic):
            out[tp] = PartitionState(live_replicas[0], st.leader_epoch + 1, [live_replicas[0]], st.partition_epoch + 1)
        elif st.leader != -1:
            # Offline: keep the last ISR so only one of them can lead again (no unclean election).
            out[tp] = PartitionState(-1, st.leader_epoch + 1, list(st.isr), st.partition_epoch + 1)
    return out


def on_controlled_shutdown(
    topics: Topics, states: States, broker: int, live: set[int]
) -> tuple[dict[TopicPartition, PartitionState], int]:
    """Move ``broker``'s leaderships to other ISR members and drop it from ISRs.

    Returns the changes and how many leaderships could not move (it is the only ISR member)."""
    out: dict[TopicPartition, PartitionState] = {}
    stuck = 0
    for tp, st in states.items():
        if broker not in st.isr and st.leader != broker:
            continue
        replicas = _replicas(topics, tp)
        others = [b for b in st.isr if b != broker and b in live]
        if st.leader == broker:
            candidates = [r for r in replicas if r in others]
            if not candidates:
                stuck += 1
                continue
            out[tp] = PartitionState(candidates[0], st.leader_epoch + 1, others, st.partition_epoch + 1)
        elif others:
            out[tp] = PartitionState(st.leader, st.leader_epoch, [b for b in st.isr if b != broker], st.partition_epoch + 1)
    return out, stuck


def preferred_elections(
    topics: Topics, states: States, live: set[int], only: Iterable[TopicPartition] | None = None
) -> dict[TopicPartition, PartitionState]:
    """Make the first replica the leader wherever it is alive, in the ISR and not leading yet."""
    wanted = set(only) if only is not None else None
    out: dict[TopicPartition, PartitionState] = {}
    for tp, st in states.items():
        if wanted is not None and tp not in wanted:
            continue
        replicas = _replicas(topics, tp)
        if not replicas:
            continue
        pref = replicas[0]
        if st.leader != pref and pref in live and pref in st.isr:
            out[tp] = PartitionState(pref, st.leader_epoch + 1, list(st.isr), st.partition_epoch + 1)
    return out


def check_broker_epoch(registration: Mapping[str, object] | None, broker: int, incarnation: str) -> None:
    """Refuse an internal request unless ``broker`` is registered now with this ``incarnation``
    (Kafka's broker epoch): a forged id, or a stale process of a restarted broker, is fenced."""
    if registration is None:
        raise StaleBrokerEpochError(f"broker {broker} is not registered")
    if not incarnation or str(registration.get("incarnation", "")) != incarnation:
        raise StaleBrokerEpochError(
            f"broker {broker} incarnation {incarnation!r} is not the live one"
        )


def eligible_brokers(registrations: Iterable[Mapping[str, object]], shutting_down: Mapping[int, str],
                     refused: set[int]) -> set[int]:
    """The brokers that may lead a partition or join an ISR: registered, their port not refusing connections,
    and not in a controlled shutdown. ``shutting_down`` maps a broker to the incarnation that asked for its
    controlled shutdown; a registration with another incarnation is a restart, eligible again. As Kafka
    (KIP-841): between its controlled shutdown and its exit a broker still fetches, so its leader would add
    it back to the ISR, and a preferred-leader election would then make it the leader of partitions it is
    about to stop serving (seen in CI: acknowledged-looking sends answered NOT_LEADER, the producer's
    sequence broken)."""
    out = set()
    for reg in registrations:
        broker = int(str(reg["id"]))
        asked = shutting_down.get(broker)
        if asked is None or asked != str(reg.get("incarnation", "")):
            out.add(broker)
    return out - refused


AlterItem = tuple[TopicPartition, int, int, list[int]]  # partition, leader epoch, partition epoch, new ISR
#: Partitions one AlterPartition request may name (a broker sends at most ``isr_batches.MAX_BATCH``).
MAX_ALTER_PARTITION_ITEMS = 10_000


def alter_partitions(
    topics: Topics, states: States, broker: int, items: Iterable[AlterItem], live: set[int],
) -> list[PartitionState | TidelogError]:
    """Validate a batch of one leader's ISR proposals (Kafka's AlterPartition carries many partitions):
    per item, in order, the new state or the error refusing it. Each item is judged alone, exactly as
    a request of that one partition; a partition named twice is refused the second time."""
    out: list[PartitionState | TidelogError] = []
    seen: set[TopicPartition] = set()
    for tp, leader_epoch, partition_epoch, new_isr in items:
        st = states.get(tp)
        replicas = _replicas(topics, tp)
        if st is None or not replicas:
            out.append(AlterPartitionError(f"{tp} does not exist", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        elif tp in seen:
            out.append(AlterPartitionError(f"{tp} is named twice in one request", code=ErrorCode.INVALID_REQUEST))
        else:
            try:
                out.append(alter_partition(st, replicas, broker, leader_epoch, partition_epoch, new_isr, live))
            except AlterPartitionError as exc:
                out.append(exc)
        seen.add(tp)
    return out


def alter_partition(
    st: PartitionState, replicas: list[int], broker: int, leader_epoch: int, partition_epoch: int,
    new_isr: list[int], live: set[int],
) -> PartitionState:
    """Validate a leader's ISR proposal (Kafka's AlterPartition) and return the new state."""
    if st.leader != broker or st.leader_epoch != leader_epoch:
        raise AlterPartitionError(
            f"broker {broker} epoch {leader_epoch} is not the leader (leader {st.leader} epoch {st.leader_epoch})",
            code=ErrorCode.FENCED_LEADER_EPOCH,
        )
    if st.partition_epoch != partition_epoch:
        raise AlterPartitionError(
            f"partition epoch {partition_epoch} is stale (current {st.partition_epoch})",
            code=ErrorCode.INVALID_UPDATE_VERSION,
        )
    if broker not in new_isr or any(b not in replicas for b in new_isr):
        raise AlterPartitionError(f"ISR {new_isr} must hold the leader and only replicas {replicas}",
                                  code=ErrorCode.INVALID_REQUEST)
    added = [b for b in new_isr if b not in st.isr]
    if any(b not in live for b in added):
        raise AlterPartitionError(f"cannot add offline brokers {added} to the ISR", code=ErrorCode.INELIGIBLE_REPLICA)
    ordered = [b for b in replicas if b in new_isr]
    return PartitionState(st.leader, st.leader_epoch, ordered, st.partition_epoch + 1)
