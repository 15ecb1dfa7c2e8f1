"""The broker-wide high-watermark checkpoint (services/broker/log/hw_checkpoint.py), as Kafka's
``replication-offset-checkpoint``: round trip, torn files refused whole, and the replica manager
migrating per-partition ``high-watermark`` files into it."""

from __future__ import annotations

import asyncio
import os

import pytest

from services.broker.log import hw_checkpoint as cp
from services.broker.replica_manager import ReplicaManager
from shared.config import LogConfig
from shared.records.builder import encode_batch
from shared.types import TopicPartition as TP


def test_round_trip_and_format() -> None:
    hws = {TP("b.t", 1): 7, TP("a-t", 0): 0, TP("a-t", 10): 123}
    text = cp.format_checkpoint(hws)
    assert text == "0\n3\na-t 0 0\na-t 10 123\nb.t 1 7\n"
    assert cp.parse_checkpoint(text) == hws
    assert cp.parse_checkpoint(cp.format_checkpoint({})) == {}


@pytest.mark.parametrize("text", ["", "1\n0\n", "0\n2\nt 0 1\n", "0\nx\n", "0\n1\nt 0\n", "0\n1\nt -1 3\n",
                                  "0\n1\nt 0 -3\n", "0\n1\nt zero 3\n"])
def test_torn_or_foreign_files_are_refused_whole(text: str) -> None:
    with pytest.raises(cp.CheckpointFormatError):
        cp.parse_checkpoint(text)


def test_unreadable_file_reads_as_empty(tmp_path) -> None:
    assert cp.read_checkpoint(str(tmp_path)) == {}
    (tmp_path / cp.FILE).write_text("0\n5\nt 0 1\n")
    assert cp.read_checkpoint(str(tmp_path)) == {}
    cp.write_checkpoint(str(tmp_path), {TP("t", 0): 4})
    assert cp.read_checkpoint(str(tmp_path)) == {TP("t", 0): 4}


def test_manager_migrates_legacy_files_and_restores_hws(tmp_path) -> None:
    data = str(tmp_path)
    config = LogConfig()
    rm = ReplicaManager(1, data)
    parts = {tp: rm._open(tp, "id", config) for tp in (TP("t", 0), TP("t", 1))}
    for part in parts.values():
        part.log.append_as_leader(_batch(), leader_epoch=0)
        part.high_watermark = 1
    rm.partitions.update(parts)
    asyncio.run(rm.close())
    assert cp.read_checkpoint(data) == {TP("t", 0): 1, TP("t", 1): 1}
    # An older broker's layout: per-partition files, no broker-wide file.
    os.remove(os.path.join(data, cp.FILE))
    for p in (0, 1):
        with open(os.path.join(data, f"t-{p}", cp.LEGACY_FILE), "w") as f:
            f.write("1\n")
    rm = ReplicaManager(1, data)
    parts = {tp: rm._open(tp, "id", config) for tp in (TP("t", 0), TP("t", 1))}
    assert [p.high_watermark for p in parts.values()] == [1, 1]
    rm.partitions.update(parts)
    asyncio.run(rm.checkpoint_high_watermarks())
    assert cp.read_checkpoint(data) == {TP("t", 0): 1, TP("t", 1): 1}
    assert not any(os.path.exists(os.path.join(data, f"t-{p}", cp.LEGACY_FILE)) for p in (0, 1))
    asyncio.run(rm.close())
    rm = ReplicaManager(1, data)
    assert rm._open(TP("t", 1), "id", config).high_watermark == 1


def _batch() -> bytes:
    return encode_batch([(1_700_000_000_000, b"k", b"v", None)])
