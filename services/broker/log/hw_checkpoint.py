"""High watermarks of every partition of a broker in one file, as Kafka's ``replication-offset-checkpoint``.

One file per data directory, rewritten atomically (temporary file, fsync, rename) when some high
watermark moved: after a burst over thousands of partitions that is one write, where one
``high-watermark`` file per partition was thousands of writes on the event loop. Format (Kafka's):
a version line ``0``, a count line, then ``topic partition offset`` per line. Topic names never hold
spaces (``shared.topic_names``). Logs written before this file existed keep their per-partition
``high-watermark`` file until the first checkpoint covers them (``LEGACY_FILE``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from shared.types import TopicPartition

log = logging.getLogger(__name__)

FILE = "replication-offset-checkpoint"
LEGACY_FILE = "high-watermark"  # in each partition directory, before this file existed
VERSION = 0


class CheckpointFormatError(ValueError):
    pass


def format_checkpoint(hws: Mapping[TopicPartition, int]) -> str:
    lines = [str(VERSION), str(len(hws))]
    lines += [f"{tp.topic} {tp.partition} {hw}" for tp, hw in sorted(hws.items())]
    return "\n".join(lines) + "\n"


def parse_checkpoint(text: str) -> dict[TopicPartition, int]:
    """The high watermarks in ``text``; ``CheckpointFormatError`` on any inconsistency (a torn file
    is refused whole, never half read)."""
    lines = text.splitlines()
    if len(lines) < 2 or lines[0].strip() != str(VERSION):
        raise CheckpointFormatError(f"unknown version line {lines[0]!r}" if lines else "empty file")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointFormatError(f"bad count line {lines[1]!r}") from None
    if count != len(lines) - 2:
        raise CheckpointFormatError(f"count {count} but {len(lines) - 2} entries")
    out: dict[TopicPartition, int] = {}
    for line in lines[2:]:
        parts = line.split()
        if len(parts) != 3:
            raise CheckpointFormatError(f"bad entry {line!r}")
        try:
            partition, hw = int(parts[1]), int(parts[2])
        except ValueError:
            raise CheckpointFormatError(f"bad entry {line!r}") from None
        if partition < 0 or hw < 0:
            raise CheckpointFormatError(f"bad entry {line!r}")
        out[TopicPartition(parts[0], partition)] = hw
    return out


def read_checkpoint(data_dir: str) -> dict[TopicPartition, int]:
    """The broker's checkpoint; empty if missing or unreadable (high watermarks then start from the
    legacy files or 0 and are re-established by the leaders: a lower one is always safe)."""
    path = os.path.join(data_dir, FILE)
    try:
        with open(path) as f:
            return parse_checkpoint(f.read())
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, CheckpointFormatError) as exc:
        log.warning("ignoring unreadable high-watermark checkpoint", extra={"path": path, "error": str(exc)})
        return {}


def write_checkpoint(data_dir: str, hws: Mapping[TopicPartition, int]) -> None:
    path = os.path.join(data_dir, FILE)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(format_checkpoint(hws))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_legacy(directory: str) -> int | None:
    """A partition directory's own ``high-watermark`` file (older layout), if any."""
    try:
        with open(os.path.join(directory, LEGACY_FILE)) as f:
            return int(f.read().strip())
    except (FileNotFoundError, ValueError):
        return None


def remove_legacy(directory: str) -> None:
    try:
        os.remove(os.path.join(directory, LEGACY_FILE))
    except FileNotFoundError:
        pass
