"""Metadata values stored in etcd, as typed records with JSON forms."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class TopicRecord:
    """``/topics/<name>``: identity, replica assignment and config overrides."""

    name: str
    topic_id: str
    assignment: dict[int, list[int]]  # partition -> replicas (preferred leader first)
    configs: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "topic_id": self.topic_id,
            "assignment": {str(p): r for p, r in sorted(self.assignment.items())},
            "configs": self.configs,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicRecord:
        return cls(d["name"], d["topic_id"], {int(p): list(r) for p, r in d["assignment"].items()}, dict(d.get("configs", {})))


@dataclass(frozen=True)
class PartitionState:
    """``/partitions/<topic>/<p>``: leadership and ISR, changed only by the controller."""

    leader: int  # -1 when offline
    leader_epoch: int
    isr: list[int]
    partition_epoch: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PartitionState:
        return cls(int(d["leader"]), int(d["leader_epoch"]), [int(x) for x in d["isr"]], int(d.get("partition_epoch", 0)))


@dataclass(frozen=True)
class ReassignmentRecord:
    """``/reassignments/<topic>/<p>``: a partition under reassignment (Kafka's KIP-455).

    While it exists the topic record lists the full replica set (the original replicas in their order,
    then ``adding``); ``target`` is the set (in preferred order) it becomes once every target replica
    is in the ISR; ``removing`` leave then. The original replicas are the full set minus ``adding``."""

    target: list[int]
    adding: list[int]
    removing: list[int]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ReassignmentRecord:
        return cls([int(x) for x in d["target"]], [int(x) for x in d.get("adding", [])],
                   [int(x) for x in d.get("removing", [])])
