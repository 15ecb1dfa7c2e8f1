"""Member reconciliation of KIP-848: revoke before assign. Pure.

A member moves from its current assignment towards its target in two steps:

1. Partitions of its current assignment that are not in its target are put in
   ``pending_revocation`` (state UNREVOKED_PARTITIONS); the member keeps its
   epoch and is told its assignment without them. It must report, in a later
   heartbeat's owned partitions, that it released them (or be fenced when its
   rebalance timeout passes).
2. Then it takes the target's assignment epoch, and of the new partitions gets
   only those no other member still holds (state UNRELEASED_PARTITIONS until
   the others release the rest, re-checked at each heartbeat).

A member whose partitions do not change keeps consuming throughout.
"""

from __future__ import annotations

from services.coordinator.group import (
    STABLE,
    STATIC_LEAVE_EPOCH,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    Member,
)
from shared.types import TopicPartition


def reconcile(group: ConsumerGroup, member: Member, owned: set[TopicPartition] | None, now_ms: int) -> bool:
    """Advance ``member`` towards the target; ``owned`` is what the member reported holding
    (None: not reported this time). Returns True if the member's assignment state changed."""
    if member.epoch == STATIC_LEAVE_EPOCH:
        return False
    before = (member.epoch, member.state, frozenset(member.assigned), frozenset(member.pending_revocation))
    if member.state == UNREVOKED_PARTITIONS:
        if owned is None or owned & member.pending_revocation:
            return False  # still waiting for the member to release them
        member.pending_revocation = set()
        member.revocation_deadline_ms = None
    target = group.target.get(member.member_id, set())
    if member.epoch == group.target_epoch and member.state == STABLE:
        return False
    keep = member.assigned & target
    revoke = member.assigned - target
    if revoke:
        member.assigned = keep
        member.pending_revocation = revoke
        member.state = UNREVOKED_PARTITIONS
        member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
    else:
        owners = group.owners()
        free = {tp for tp in target - keep if owners.get(tp, member.member_id) == member.member_id}
        if member.epoch != group.target_epoch:
            member.previous_epoch, member.epoch = member.epoch, group.target_epoch
        member.assigned = keep | free
        member.state = STABLE if member.assigned == target else UNRELEASED_PARTITIONS
    after = (member.epoch, member.state, frozenset(member.assigned), frozenset(member.pending_revocation))
    return after != before
