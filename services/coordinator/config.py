"""Group coordinator configs, with Kafka's names and defaults."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GroupConfig:
    #: group.consumer.session.timeout.ms: a member that sends no heartbeat for this long is removed.
    session_timeout_ms: int = 45_000
    #: group.consumer.heartbeat.interval.ms: how often members are told to heartbeat.
    heartbeat_interval_ms: int = 5_000
    #: Tidelog's own (Kafka has no such config): the interval members are told while their group is
    #: converging -- it changed within the last heartbeat interval, or a member has partitions to
    #: release or to receive -- so that revocations and hand-overs take a fraction of a second instead
    #: of whole heartbeat intervals. Never longer than ``heartbeat_interval_ms``.
    converging_heartbeat_interval_ms: int = 250
    #: group.consumer.max.size: members per group.
    max_size: int = 2**31 - 1
    #: offsets.retention.minutes (7 days), in ms: offsets of a group empty for this long are deleted.
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    #: offset.metadata.max.bytes: the longest metadata string an offset commit may carry.
    offset_metadata_max_bytes: int = 4096
    #: offsets.topic.num.partitions
    offsets_partitions: int = 50
    #: offsets.retention.check.interval.ms: how long a classic group stays Empty with no committed
    #: offsets before it is deleted (Kafka deletes such groups at its next retention check).
    offsets_retention_check_interval_ms: int = 600_000

    # -- classic groups (JoinGroup / SyncGroup / Heartbeat / LeaveGroup) -----------------------------

    #: group.min.session.timeout.ms: the shortest session timeout a JoinGroup may ask for.
    classic_min_session_timeout_ms: int = 6_000
    #: group.max.session.timeout.ms: the longest.
    classic_max_session_timeout_ms: int = 1_800_000
    #: group.initial.rebalance.delay.ms: how long the first rebalance of an empty group waits for more
    #: members (extended by the same delay each time one joins, up to the rebalance timeout).
    classic_initial_rebalance_delay_ms: int = 3_000
    #: group.max.size: members per classic group.
    classic_max_size: int = 2**31 - 1
    #: how long a new member's JoinGroup may stay parked before the member is dropped (Kafka's fixed
    #: 5 minutes: the client retries if it is still there).
    classic_new_member_join_timeout_ms: int = 300_000
