"""Checkpoint offsets the cluster no longer has (pure: no Spark, no network).

A streaming query's checkpoint keeps, per partition, the next offset to read. When the topic was deleted
and created again (or the log truncated), that offset can lie beyond the partition's end: reading on from
it would silently skip everything the new partition gets until it catches up. As Spark's Kafka source
does, this is data loss: with ``failOnDataLoss`` (the default) the query fails and says why; without it
the partition is read again from its earliest offset, with a warning.
"""

from __future__ import annotations

import logging

from shared.errors import DataLossError
from shared.types import TopicPartition

log = logging.getLogger(__name__)


def offsets_past_end(begin: dict[TopicPartition, int], latest: dict[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int]]:
    """Partitions whose checkpoint offset lies beyond their current end: ``{tp: (checkpoint, end)}``."""
    return {tp: (off, latest[tp]) for tp, off in sorted(begin.items()) if tp in latest and off > latest[tp]}


def data_loss_message(lost: dict[TopicPartition, tuple[int, int]], fail: bool) -> str:
    changes = "; ".join(f"partition {tp}'s offset was changed from {a} to {b}" for tp, (a, b) in lost.items())
    why = ("some data may have been missed: records the query had not read yet are not in the cluster any more "
           "(the topic may have been deleted and created again, or its log truncated)")
    if fail:
        return (f"{changes}; {why}. If you want the streaming query to go on in such cases (reading these "
                f"partitions again from their earliest offset), set the source option \"failOnDataLoss\" to \"false\".")
    return (f"{changes}; {why}. Reading these partitions again from their earliest offset, as \"failOnDataLoss\" "
            f"is \"false\".")


def resolve_data_loss(begin: dict[TopicPartition, int], latest: dict[TopicPartition, int],
                      earliest: dict[TopicPartition, int], *, fail: bool, warn: bool = True) -> dict[TopicPartition, int]:
    """``begin`` with every offset past its partition's end replaced by the partition's earliest offset;
    raises ``DataLossError`` instead when ``fail``. ``earliest`` needs only the partitions past their end."""
    lost = offsets_past_end(begin, latest)
    if not lost:
        return begin
    if fail:
        raise DataLossError(data_loss_message(lost, fail=True))
    if warn:
        log.warning("%s", data_loss_message(lost, fail=False))
    return {**begin, **{tp: earliest[tp] for tp in lost}}
