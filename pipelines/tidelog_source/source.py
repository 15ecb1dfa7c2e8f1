"""The ``tidelog`` PySpark data source: batch and streaming reads (writes: ``sink.py``).

Driver-side methods (``partitions``, ``latestOffset``...) resolve offsets through
the brokers; ``read()`` runs in executor workers and reads its offset range with
the Python client (gRPC), returning Arrow record batches. The output schema and
option names are those of Spark's Kafka source, the security ones included
(``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*``: ``security.py``); every client the
source and the sink build, on the driver and in tasks, carries them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from pipelines.tidelog_source.data_loss import offsets_past_end, resolve_data_loss
from pipelines.tidelog_source.group_commit import GroupOffsetCommitter
from pipelines.tidelog_source.offsets import OffsetResolver, Offsets, from_tps, plan_ranges, to_tps
from pipelines.tidelog_source.options import SourceOptions, parse_options
from pipelines.tidelog_source.sink import TidelogStreamWriter, TidelogWriter
from shared.client.cluster import ClusterClient
from shared.client.range_reader import read_range_responses
from shared.errors import CorruptRecordError, OffsetOutOfRangeError, UnreadableBatchError
from shared.records.arrow import Piece, arrow_schema, record_batch, take_piece
from shared.records.arrow import binary_column as binary_column  # re-exported: it lived here
from shared.records.columns import decode_columns, decode_columns_many
from shared.records.decoder import records_section
from shared.records.header import HEADER_SIZE, BatchHeader
from shared.runtime import tune_allocator
from shared.types import TopicPartition

BASE_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
               "timestamp timestamp, timestampType int")
HEADERS_SCHEMA = BASE_SCHEMA + ", headers array<struct<key: string, value: binary>>"

@dataclass(frozen=True)
class RangePartition(InputPartition):
    topic: str
    partition: int
    start: int
    end: int


def read_partition(opts: SourceOptions, part: RangePartition) -> Iterator[pa.RecordBatch]:
    """Executor side: the records of ``[start, end)`` of one topic-partition as Arrow batches.

    Records are decoded into positions and the key and value columns are cut from the fetched
    buffer in one copy each (``shared.records.arrow``), so no Python object is made per record.
    One Arrow batch per fetched response, handed to Spark as soon as it is decoded: the response's
    uncompressed batches are decoded together (``decode_columns_many``), the others one by one.
    """
    tune_allocator()
    schema = arrow_schema(opts.include_headers)
    cluster = ClusterClient(opts.bootstrap_servers, "tidelog-spark-reader", security=opts.security.client_security())
    tp = TopicPartition(part.topic, part.partition)
    start, end = part.start, part.end
    try:
        for data, batches in read_range_responses(
                cluster, tp, start, end, max_bytes=opts.max_bytes_per_fetch, fail_on_data_loss=opts.fail_on_data_loss,
                isolation_level=1 if opts.isolation_level == "read_committed" else 0):
            pieces = _decode(data, [b for b in batches if not b[1].is_control], tp, start, opts.include_headers)
            pieces = [_within(p, start, end) for p in pieces]
            pieces = [p for p in pieces if len(p[1])]
            if pieces:
                yield record_batch(pieces, part.topic, part.partition, schema)
    finally:
        cluster.close()


def _decode(data: bytes, batches: list[tuple[int, BatchHeader]], tp: TopicPartition, start: int,
            include_headers: bool) -> list[Piece]:
    """The records of one response's batches: runs of plain uncompressed batches at once, else one by one."""
    if not batches:
        return []
    if not any(h.compression for _, h in batches):
        found = decode_columns_many(data, batches)
        if found is not None:
            return [(data, found[0], found[1])]
    pieces: list[Piece] = []
    for pos, header in batches:
        try:
            if header.compression:
                buf = records_section(data, header, pos)
                c = decode_columns(header, buf, with_headers=include_headers, empty_headers_as_none=True)
            else:
                buf = data
                c = decode_columns(header, data, with_headers=include_headers, empty_headers_as_none=True,
                                   start=pos + HEADER_SIZE, end=pos + header.size)
        except CorruptRecordError as exc:
            raise UnreadableBatchError(tp.topic, tp.partition, max(header.base_offset, start),
                                       exc.args[0]) from None
        pieces.append((buf, c, header.timestamp_type))
    return pieces


def _within(piece: Piece, start: int, end: int) -> Piece:
    """The piece's records in ``[start, end)`` (a fetch's first and last batches can reach past them)."""
    offsets = piece[1].positions.offsets
    if len(offsets) and (offsets[0] < start or offsets[-1] >= end):
        return take_piece(piece, (offsets >= start) & (offsets < end))
    return piece


class TidelogDataSource(DataSource):
    """``spark.read.format("tidelog")`` / ``readStream`` / ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "tidelog"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).lower() == "true"
        return HEADERS_SCHEMA if include else BASE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_options(self.options, streaming=False)
        opts.security.check_files()
        return TidelogBatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = parse_options(self.options, streaming=True)
        opts.security.check_files()
        return TidelogStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return TidelogWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return TidelogStreamWriter(dict(self.options), schema)


class TidelogBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[RangePartition]:
        resolver = OffsetResolver(self.opts)
        try:
            tps = resolver.partitions()
            start = resolver.resolve(self.opts.starting, tps, starting=True)
            end = resolver.resolve(self.opts.ending, tps, starting=False)
            earliest = resolver.earliest(tps)
        finally:
            resolver.close()
        for tp, off in start.items():
            if off < earliest.get(tp, 0):
                if self.opts.fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        f"{tp}: startingOffsets {off} is below the log start offset {earliest[tp]} "
                        "(data was deleted); set failOnDataLoss=false to start at the earliest offset")
                start[tp] = earliest[tp]
        ranges = plan_ranges(start, end, self.opts.min_partitions)
        return [RangePartition(r.topic, r.partition, r.start, r.end) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return iter(())  # Spark's placeholder when partitions() planned nothing
        return read_partition(self.opts, partition)


class TidelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over offsets ``{topic: {partition: offset}}``; the checkpoint holds the truth."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._resolver: OffsetResolver | None = None
        self._target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow's end
        self._committer: GroupOffsetCommitter | None = None

    @property
    def resolver(self) -> OffsetResolver:
        if self._resolver is None:
            self._resolver = OffsetResolver(self.opts)
        return self._resolver

    def initialOffset(self) -> Offsets:
        tps = self.resolver.partitions()
        return from_tps(self.resolver.resolve(self.opts.starting, tps, starting=True))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.resolver.partitions()
        self._target = self.resolver.latest(tps)

    def _latest(self) -> dict[TopicPartition, int]:
        if self._target is not None:
            return dict(self._target)
        return self.resolver.latest(self.resolver.partitions())

    def _past_end_reset(self, begin: dict[TopicPartition, int], latest: dict[TopicPartition, int],
                        warn: bool) -> dict[TopicPartition, int]:
        """Checkpoint offsets beyond a partition's end (topic recreated): fail, or read it from its start."""
        lost = offsets_past_end(begin, latest)
        earliest = self.resolver.earliest(list(lost)) if lost else {}
        return resolve_data_loss(begin, latest, earliest, fail=self.opts.fail_on_data_loss, warn=warn)

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        begin = to_tps(start)
        latest = self._latest()
        new = [tp for tp in latest if tp not in begin]
        if new:  # partitions that appeared since: read them from their start (as Spark's Kafka source)
            begin.update(self.resolver.earliest(new))
        begin = self._past_end_reset(begin, latest, warn=True)
        end = {tp: max(latest.get(tp, begin[tp]), begin[tp]) for tp in begin}
        if isinstance(limit, ReadMaxRows):
            end = self._rate_limit(begin, end, limit.max_rows)
        return from_tps(end)

    @staticmethod
    def _rate_limit(begin: dict[TopicPartition, int], end: dict[TopicPartition, int], max_rows: int) -> dict[TopicPartition, int]:
        """Spread ``max_rows`` over partitions in proportion to their backlog (as Spark does)."""
        lag = {tp: end[tp] - begin[tp] for tp in end}
        total = sum(lag.values())
        if total <= max_rows:
            return end
        out = {}
        budget = max_rows
        for tp in sorted(lag):
            take = min(lag[tp], int(max_rows * lag[tp] / total))
            out[tp] = begin[tp] + take
            budget -= take
        for tp in sorted(lag):  # rounding leftovers go to the partitions with backlog left
            if budget <= 0:
                break
            extra = min(budget, end[tp] - out[tp])
            out[tp] += extra
            budget -= extra
        return out

    def partitions(self, start: Offsets, end: Offsets) -> list[RangePartition]:
        begin, stop = to_tps(start), to_tps(end)
        new = [tp for tp in stop if tp not in begin]
        if new:
            begin.update(self.resolver.earliest(new))
        begin = self._past_end_reset(begin, stop, warn=False)  # latestOffset warned already
        earliest = self.resolver.earliest(list(stop))
        for tp, off in list(begin.items()):
            if tp in earliest and off < earliest[tp]:
                if self.opts.fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        f"{tp}: offsets {off}..{earliest[tp] - 1} were deleted before this query read them; "
                        "set failOnDataLoss=false to skip lost data")
                begin[tp] = earliest[tp]
        return [RangePartition(r.topic, r.partition, r.start, r.end) for r in plan_ranges(begin, stop, None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return iter(())  # Spark's placeholder when partitions() planned nothing
        return read_partition(self.opts, partition)

    def commit(self, end: Offsets) -> None:
        """Offsets live in Spark's checkpoint; with ``commitOffsetsToGroup`` they are also committed to
        that consumer group (best effort) so lag tools see the query's progress."""
        if self.opts.commit_to_group:
            if self._committer is None:
                self._committer = GroupOffsetCommitter(self.opts.bootstrap_servers, self.opts.commit_to_group,
                                                      self.opts.security)
            self._committer.commit(to_tps(end))

    def stop(self) -> None:
        if self._resolver is not None:
            self._resolver.close()
        if self._committer is not None:
            self._committer.close()
