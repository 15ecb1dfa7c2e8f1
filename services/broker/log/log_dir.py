"""A broker's data directory: where each partition's log lives, which topic it belongs to, and the
broker-wide high-watermark checkpoint (files only; no partitions' roles, no networking).

Layout (Kafka's): ``<data dir>/<topic>-<partition>/`` holds a partition's segments and its
``partition.metadata`` (the topic id, so a log left by an older topic of the same name is recognised
and removed); ``<data dir>/replication-offset-checkpoint`` holds every partition's high watermark.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterable

from services.broker.log import hw_checkpoint
from services.broker.log.partition_log import PartitionLog
from shared.config import LogConfig
from shared.types import TopicPartition

log = logging.getLogger(__name__)
TOPIC_ID_FILE = "partition.metadata"


class LogDirectory:
    def __init__(self, path: str) -> None:
        self.path = path
        # The broker-wide high-watermark checkpoint: as read at the first open, as last written.
        self._hw_checkpoint: dict[TopicPartition, int] | None = None
        self._hw_written: dict[TopicPartition, int] = {}
        self._legacy_hw_dirs: list[tuple[TopicPartition, str]] = []
        self._hw_write_lock = threading.Lock()  # opens (worker threads), checkpoints and close may overlap

    def dir_for(self, tp: TopicPartition) -> str:
        return os.path.join(self.path, f"{tp.topic}-{tp.partition}")

    def open_log(self, tp: TopicPartition, topic_id: str, config: LogConfig,
                 clock: Callable[[], int]) -> tuple[PartitionLog, int]:
        """Open (recovering) or create the log of ``tp`` for topic ``topic_id``; returns it with the
        high watermark checkpointed for it (0 when none). Blocking file work: call from a worker thread."""
        path = self.dir_for(tp)
        id_file = os.path.join(path, TOPIC_ID_FILE)
        if os.path.isdir(path):
            try:
                with open(id_file) as f:
                    existing = f.read().strip()
            except FileNotFoundError:
                existing = ""
            if existing != topic_id:  # a log left from an older topic with the same name
                shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path, exist_ok=True)
        with open(id_file, "w") as f:
            f.write(topic_id)
        plog = PartitionLog(path, config, clock)
        with self._hw_write_lock:
            if self._hw_checkpoint is None:  # read once, by the first open
                self._hw_checkpoint = hw_checkpoint.read_checkpoint(self.path)
            hw = self._hw_checkpoint.pop(tp, None)  # used once: a later re-creation starts afresh
            if hw is None:
                hw = hw_checkpoint.read_legacy(path)
                if hw is not None:  # a log from before the broker-wide file: removed once that covers it
                    self._legacy_hw_dirs.append((tp, path))
        return plog, hw or 0

    def delete_strays(self, wanted: Iterable[TopicPartition]) -> None:
        """Remove partition directories this broker no longer hosts (left while it was down)."""
        known = {f"{tp.topic}-{tp.partition}" for tp in wanted}
        for name in os.listdir(self.path):
            path = os.path.join(self.path, name)
            if os.path.isdir(path) and os.path.exists(os.path.join(path, TOPIC_ID_FILE)) and name not in known:
                shutil.rmtree(path, ignore_errors=True)
                log.info("stray partition directory deleted", extra={"dir": name})

    @property
    def opened_any(self) -> bool:
        return self._hw_checkpoint is not None

    def hw_changed(self, hws: dict[TopicPartition, int]) -> bool:
        return hws != self._hw_written

    def write_high_watermarks(self, hws: dict[TopicPartition, int]) -> None:
        """Rewrite the checkpoint (blocking: a worker thread, or at close)."""
        with self._hw_write_lock:
            try:
                hw_checkpoint.write_checkpoint(self.path, hws)
            except OSError as exc:
                log.warning("cannot write the high-watermark checkpoint", extra={"error": str(exc)})
                return
            self._hw_written = hws
            covered = [d for tp, d in self._legacy_hw_dirs if tp in hws]
            self._legacy_hw_dirs = [(tp, d) for tp, d in self._legacy_hw_dirs if tp not in hws]
            for directory in covered:
                hw_checkpoint.remove_legacy(directory)
