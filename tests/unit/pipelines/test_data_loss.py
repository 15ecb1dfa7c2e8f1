"""Checkpoint offsets beyond a partition's end (the topic was deleted and created again): the streaming
reader fails the query when failOnDataLoss is true (the default), and otherwise reads the partition
again from its earliest offset, with a warning. Driven with a fake offset resolver: no Spark session,
no cluster."""

from __future__ import annotations

import logging

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from pipelines.tidelog_source.data_loss import DataLossError, offsets_past_end, resolve_data_loss
from pipelines.tidelog_source.offsets import from_tps
from pipelines.tidelog_source.options import parse_options
from pipelines.tidelog_source.source import TidelogStreamReader
from shared.types import TopicPartition

T0, T1 = TopicPartition("clicks", 0), TopicPartition("clicks", 1)


class FakeResolver:
    def __init__(self, earliest: dict[TopicPartition, int], latest: dict[TopicPartition, int]) -> None:
        self._earliest, self._latest = earliest, latest

    def partitions(self) -> list[TopicPartition]:
        return sorted(self._latest)

    def earliest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._earliest[tp] for tp in tps}

    def latest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._latest[tp] for tp in tps}

    def close(self) -> None:
        pass


def _reader(fail_on_data_loss: str | None) -> TidelogStreamReader:
    options = {"bootstrap.servers": "127.0.0.1:1", "subscribe": "clicks"}
    if fail_on_data_loss is not None:
        options["failOnDataLoss"] = fail_on_data_loss
    reader = TidelogStreamReader(parse_options(options, streaming=True))
    reader._resolver = FakeResolver({T0: 0, T1: 0}, {T0: 40, T1: 500})  # type: ignore[assignment]
    return reader


def test_offsets_past_the_end_fail_the_query_by_default() -> None:
    checkpoint = from_tps({T0: 1000, T1: 300})  # T0 was recreated: 40 records now, the checkpoint says 1000
    with pytest.raises(DataLossError) as err:
        _reader(None).latestOffset(checkpoint, ReadAllAvailable())
    msg = str(err.value)
    assert "partition clicks-0's offset was changed from 1000 to 40" in msg
    assert '"failOnDataLoss" to "false"' in msg
    with pytest.raises(DataLossError):
        _reader("true").partitions(checkpoint, from_tps({T0: 40, T1: 500}))


def test_without_fail_on_data_loss_the_partition_is_read_again_from_its_start(caplog) -> None:
    reader = _reader("false")
    checkpoint = from_tps({T0: 1000, T1: 300})
    with caplog.at_level(logging.WARNING):
        end = reader.latestOffset(checkpoint, ReadAllAvailable())
    assert end == from_tps({T0: 40, T1: 500})
    assert any("changed from 1000 to 40" in r.getMessage() for r in caplog.records)
    ranges = {(p.partition, p.start, p.end) for p in reader.partitions(checkpoint, end)}
    assert ranges == {(0, 0, 40), (1, 300, 500)}  # all of the new partition 0, partition 1 where it was


def test_pure_rule() -> None:
    assert offsets_past_end({T0: 5, T1: 9}, {T0: 5, T1: 3}) == {T1: (9, 3)}
    assert resolve_data_loss({T0: 5}, {T0: 7}, {}, fail=True) == {T0: 5}  # nothing lost: untouched
    assert resolve_data_loss({T0: 9}, {T0: 3}, {T0: 1}, fail=False, warn=False) == {T0: 1}
