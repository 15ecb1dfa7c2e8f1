"""A topic as a table in one call each way: ``read_arrow`` and ``write_arrow``.

``read_arrow`` reads a range of a topic (by default everything in it now: each partition from its log
start to its end offset at the time of the call) into one ``pyarrow.Table`` with ``poll_arrow``'s columns
(the Spark Kafka source's: key, value, topic, partition, offset, timestamp, timestampType, headers), rows
ordered by partition, then offset. It uses a consumer of its own with no group: nothing is committed. The
range is fixed when the call starts, as a Spark batch read's ``startingOffsets``/``endingOffsets``:
records written meanwhile are not read; under ``isolation_level="read_committed"`` "latest" is the last
stable offset and aborted records are left out.

``write_arrow`` writes a table's rows with ``Producer.send_batch`` (the bytes ``send()`` of each row would
write), waits until every record is acknowledged and returns how many there were. The columns are the
Spark Kafka sink's (``value``; optional ``key``, ``headers``, ``partition``) plus ``timestamp``
(CreateTime; a timestamp column or int64 milliseconds); any other column (``topic``, ``offset``, ...) is
ignored, so a table ``read_arrow`` returned can be written to another topic as it is.

Both take a pandas DataFrame or anything ``pyarrow.table()`` takes where a table goes, and the client's
settings (security, ``isolation_level``, ``acks``, ``compression_type``, ...) as keyword arguments.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from shared.errors import ErrorCode, OffsetOutOfRangeError, error_for
from shared.types import TopicPartition

if TYPE_CHECKING:
    import pyarrow as pa

#: What a range end may be: "earliest" / "latest", a time (the first offset at or after it), or
#: ``{partition: offset}`` (-2: earliest, -1: latest, as in Spark's JSON offsets; partitions not named
#: take the default: earliest for the start, latest for the end).
Bound = str | dt.datetime | Mapping[int, int]

EARLIEST, LATEST = -2, -1
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
#: send_batch's batches are cut where send() would cut them: 1 MiB batches, not Kafka's 16 KiB default
#: (a 1 KiB column ran at ~15 MB/s with 16 KiB batches here, 175-600 MB/s with 1 MiB).
WRITE_DEFAULTS: dict[str, Any] = {"batch_size": 1 << 20, "max_request_size": 4 << 20, "linger_ms": 5}


def read_arrow(bootstrap_servers: str | list[str], topic: str, *, partitions: Iterable[int] | None = None,
               start: Bound = "earliest", end: Bound = "latest", timeout_ms: int = 60_000,
               **consumer_configs: Any) -> pa.Table:
    """The records of ``topic`` from ``start`` to ``end`` (exclusive) as one Arrow table.

    ``partitions``: which ones (default all). ``timeout_ms`` bounds the whole read; a read not done by then
    raises ``REQUEST_TIMED_OUT``. A start before a partition's log start raises ``OffsetOutOfRangeError``
    unless the start is "earliest" (records removed by retention meanwhile are then skipped, as a
    consumer with ``auto_offset_reset="earliest"`` does). An unknown topic or partition raises
    ``UnknownTopicOrPartitionError``."""
    import pyarrow as pa

    from shared.client.consumer import Consumer, arrow_table_schema

    if "group_id" in consumer_configs:
        raise ValueError("read_arrow reads without a consumer group; use Consumer.poll_arrow to read in a group")
    if "auto_offset_reset" in consumer_configs:
        raise ValueError("read_arrow takes no auto_offset_reset: start says where to read from")
    if timeout_ms <= 0:
        raise ValueError("timeout_ms must be > 0")
    if isinstance(partitions, int):
        partitions = [partitions]
    try:
        if isinstance(partitions, str | bytes):  # "10" would otherwise be read as partitions 1 and 0
            raise TypeError
        wanted_parts = None if partitions is None else sorted({int(p) for p in partitions})
    except (TypeError, ValueError):
        raise ValueError(f"partitions must be a list of partition numbers, not {partitions!r:.60}") from None
    deadline = time.monotonic() + timeout_ms / 1000
    consumer_configs.setdefault("request_timeout_ms", min(max(timeout_ms, 1000), 30_000))
    # OffsetOutOfRange is handled here, not by the consumer's reset: only a start of "earliest" may move on
    # (to the new log start), and never backwards.
    with Consumer(bootstrap_servers, auto_offset_reset="none", **consumer_configs) as consumer:
        known = consumer.cluster.partitions_for(topic, min(timeout_ms / 1000, 10))  # raises for an unknown topic
        wanted = sorted(known) if wanted_parts is None else wanted_parts
        missing = [p for p in wanted if p not in known]
        if missing:
            raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has no partition {missing[0]}")
        tps = [TopicPartition(topic, p) for p in wanted]
        starts = _offsets(consumer, tps, start, EARLIEST, "start")
        ends = _offsets(consumer, tps, end, LATEST, "end")
        backwards = [tp for tp in tps if starts[tp] > ends[tp]]
        if backwards:
            tp = backwards[0]
            raise ValueError(f"the range of {tp} ends before it starts: start {starts[tp]}, end {ends[tp]}")
        from_earliest = {tp for tp in tps if _earliest(start, tp.partition)}
        chunks: dict[TopicPartition, list[pa.RecordBatch]] = {tp: [] for tp in tps}
        after = dict(starts)  # per partition, the offset the next kept row must reach
        todo = [tp for tp in tps if starts[tp] < ends[tp]]
        if todo:
            consumer.assign(todo)
            for tp in todo:
                consumer.seek(tp, starts[tp])
        while todo:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                why = f" ({consumer.fetch_failure})" if consumer.fetch_failure else ""
                raise error_for(ErrorCode.REQUEST_TIMED_OUT,
                                f"read_arrow of {topic}: {len(todo)} partition(s) not read up to their end offset "
                                f"within {timeout_ms} ms{why}")
            try:
                table = consumer.poll_arrow(timeout_ms=min(left_ms, 500))
            except OffsetOutOfRangeError:
                firsts = consumer.beginning_offsets(todo)
                gone = [tp for tp in todo if tp in from_earliest and consumer.position(tp) < firsts[tp]]
                if not gone:  # an explicit start removed, or a log truncated below what was read: not skipped
                    raise
                for tp in gone:  # retention removed records after the read began: "earliest" moves on
                    consumer.seek(tp, firsts[tp])
                continue
            for batch in table.to_batches():
                _keep(batch, chunks, after, ends, topic)
            done = [tp for tp in todo if consumer.position(tp) >= ends[tp]]
            if done:
                todo = [tp for tp in todo if tp not in done]
                if todo:
                    consumer.assign(todo)  # stop fetching what is read
        return pa.Table.from_batches([b for tp in tps for b in chunks[tp]], arrow_table_schema())


def _keep(batch: pa.RecordBatch, chunks: dict[TopicPartition, list[pa.RecordBatch]], after: dict[TopicPartition, int],
          ends: dict[TopicPartition, int], topic: str) -> None:
    """File one of poll_arrow's batches (one partition's, in offset order) under its partition: the rows
    from ``after[tp]`` (nothing kept twice, nothing out of order) up to the partition's end offset."""
    import numpy as np

    if not batch.num_rows:
        return
    tp = TopicPartition(topic, batch.column("partition")[0].as_py())
    offsets = batch.column("offset").to_numpy(zero_copy_only=False)
    lo = int(np.searchsorted(offsets, after[tp]))  # offsets rise within a batch
    hi = int(np.searchsorted(offsets, ends[tp]))
    if hi > lo:
        chunks[tp].append(batch if hi - lo == batch.num_rows else batch.slice(lo, hi - lo))
        after[tp] = int(offsets[hi - 1]) + 1


def _earliest(bound: Bound, partition: int) -> bool:
    """Whether a start bound is "earliest" for this partition."""
    if isinstance(bound, str):
        return bound == "earliest"
    if isinstance(bound, Mapping):
        return _partition_offsets(bound).get(partition, EARLIEST) == EARLIEST
    return False


def _partition_offsets(bound: Mapping[Any, Any]) -> dict[int, int]:
    """``{partition: offset}`` with the keys as ints (Spark's JSON offsets, read with ``json.loads``, have
    string keys)."""
    try:
        return {int(p): int(o) for p, o in bound.items()}
    except (TypeError, ValueError) as exc:
        raise ValueError(f"offsets must map partition numbers to offsets: {exc}") from None


def _offsets(consumer: Any, tps: list[TopicPartition], bound: Bound, default: int,
             name: str) -> dict[TopicPartition, int]:
    """Each partition's offset for a range bound (see ``Bound``)."""
    if isinstance(bound, str):
        if bound not in ("earliest", "latest"):
            raise ValueError(f"{name} must be 'earliest', 'latest', a datetime or {{partition: offset}}, not {bound!r}")
        wanted = dict.fromkeys(tps, EARLIEST if bound == "earliest" else LATEST)
    elif isinstance(bound, dt.datetime):
        # Kafka's timestamps are whole milliseconds: the first at or after the bound, rounded up.
        ms = -(-((bound if bound.tzinfo else bound.replace(tzinfo=dt.UTC)) - _EPOCH) // dt.timedelta(milliseconds=1))
        if ms < 0:
            raise ValueError(f"{name} must not be before 1970")
        found = consumer.offsets_for_times(dict.fromkeys(tps, ms))
        later = [tp for tp, hit in found.items() if hit is None]  # no record at or after the time
        out = {tp: hit[0] for tp, hit in found.items() if hit is not None}
        if later:
            out |= consumer.end_offsets(later)
        return out
    elif isinstance(bound, Mapping):
        given = _partition_offsets(bound)
        unknown = sorted(set(given) - {tp.partition for tp in tps})
        if unknown:
            raise ValueError(f"{name} names partition {unknown[0]}, which is not read")
        wanted = {tp: given.get(tp.partition, default) for tp in tps}
        bad = [o for o in wanted.values() if o < EARLIEST]
        if bad:
            raise ValueError(f"{name} offsets must be >= 0, or -2 (earliest) / -1 (latest), not {bad[0]}")
    else:
        raise TypeError(f"{name} must be 'earliest', 'latest', a datetime or a dict of offsets, "
                        f"not {type(bound).__name__}")
    out = {tp: o for tp, o in wanted.items() if o >= 0}
    for which, fetch in ((EARLIEST, consumer.beginning_offsets), (LATEST, consumer.end_offsets)):
        asked = [tp for tp, o in wanted.items() if o == which]
        if asked:
            out |= fetch(asked)
    return out


def write_arrow(bootstrap_servers: str | list[str], topic: str, table: Any, **producer_configs: Any) -> int:
    """Write every row of ``table`` to ``topic``; returns the number of records, once all are acknowledged.

    ``producer_configs`` are ``Producer``'s (``acks``, ``compression_type``, security settings, ...); the
    batch size defaults to 1 MiB (``WRITE_DEFAULTS``). Bad columns and values (see ``_check_table``) are
    refused before any row is sent. A failed send (the cluster's errors, or a record over
    ``max_request_size``, found as with ``send()``) is raised once the others have completed: records of
    other batches may have been written then, as a failure is per record batch."""
    import pyarrow as pa

    from shared.client.producer import Producer

    if "transactional_id" in producer_configs:
        raise ValueError("write_arrow does not run transactions; use Producer.send_batch inside one")
    data = table if isinstance(table, pa.Table) else (
        pa.Table.from_batches([table]) if isinstance(table, pa.RecordBatch) else pa.table(table))
    with Producer(bootstrap_servers, **(WRITE_DEFAULTS | producer_configs)) as producer:
        data = _check_table(producer, topic, data)  # before any row goes: a table is sent whole or refused
        n, futures = send_rows(producer, topic, data.to_batches(), timestamps=True)
        producer.flush()
        failure = None
        for f in futures:
            try:
                f.get()
            except Exception as exc:  # noqa: BLE001 - the first is raised once all are known
                failure = failure or exc
        if failure is not None:
            raise failure
    return n


def _check_table(producer: Any, topic: str, data: pa.Table) -> pa.Table:
    """What ``send_rows`` would refuse batch by batch, checked for the whole table before its first row is
    sent (else the batches before a bad row would be written): the topic exists (its metadata waited for up
    to 10 s, not ``max_block_ms``), the partition column holds partitions it has (refused at once rather
    than waited for), timestamps are whole non-negative milliseconds and headers are well formed. Returns
    the table with the partition column as integers (pandas gives floats for ints with a None, and a null
    column for all None: then none is given)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    count = len(producer.cluster.partitions_for(topic, min(producer.max_block_s, 10.0)))
    if not data.num_rows:
        return data
    if "timestamp" in data.column_names:
        low = pc.min(_timestamps_ms(data).cast(pa.int64())).as_py()
        if low is not None and low < 0:
            raise ValueError(f"Invalid timestamp: {low}. Timestamp should always be non-negative or null.")
    if "headers" in data.column_names:
        _check_headers(data.column("headers"), data.num_rows)
    if "partition" not in data.column_names:
        return data
    i = data.column_names.index("partition")
    col = data.column(i)
    if pa.types.is_null(col.type):
        return data.remove_column(i)
    if pa.types.is_floating(col.type):
        try:
            col = col.cast(pa.int64())
        except pa.ArrowInvalid:
            raise ValueError("the partition column must hold whole partition numbers") from None
        data = data.set_column(i, "partition", col)
    elif not pa.types.is_integer(col.type):
        raise ValueError(f"the partition column must hold integers, got {col.type}")
    bounds = pc.min_max(col)
    lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
    if lo is not None and lo < 0:
        raise ValueError(f"partition {lo} out of range for {topic}")
    if hi is not None and hi >= count:
        raise ValueError(f"partition {hi} out of range for {topic} ({count} partitions); drop the partition "
                         f"column to let the keys choose (murmur2, as send() does)")
    return data


def _check_headers(col: Any, n: int) -> None:
    """A headers column is well formed. Spark's shape (list<struct<key: string, value: binary>>, what
    ``read_arrow`` returns) is checked with Arrow compute (a null header or key is the one way it can be
    bad); any other shape by encoding it (``send_batch`` encodes it again, batch by batch)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from shared.records.columnar_encode import encode_header_column

    t = col.type
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_struct(t.value_type):
        names = {t.value_type.field(i).name: t.value_type.field(i).type for i in range(t.value_type.num_fields)}
        key_t, value_t = names.get("key"), names.get("value")
        if (len(names) == 2 and key_t is not None and value_t is not None
                and (pa.types.is_string(key_t) or pa.types.is_large_string(key_t))
                and any(f(value_t) for f in (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_string,
                                             pa.types.is_large_string, pa.types.is_null))):
            flat = pc.list_flatten(col)
            if flat.null_count:
                raise ValueError("each header must be a (key, value) pair or {'key': ..., 'value': ...}, got None")
            if pc.struct_field(flat, "key").null_count:
                raise ValueError("header keys must be str, got NoneType")
            return
    encode_header_column(col, n)


# -- rows to send_batch (also the Spark sink's) --------------------------------------------------------------


def binary_column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    """A key/value column as Arrow binary (string columns are UTF-8: the bytes are not copied)."""
    import pyarrow as pa

    if name not in batch.schema.names:
        return None
    col = batch.column(name)
    if pa.types.is_dictionary(col.type):  # a pandas category column, a Polars Categorical or Enum
        from shared.records.columnar_encode import decode_dictionary

        col = decode_dictionary(col)
    if pa.types.is_fixed_size_binary(col.type):
        col = col.cast(pa.binary())
    t = col.type
    if pa.types.is_null(t):
        return None if name == "key" else col
    if not (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_string(t)
            or pa.types.is_large_string(t) or pa.types.is_binary_view(t) or pa.types.is_string_view(t)):
        raise ValueError(f"key and value columns must be binary or string, got {t} for {name}")
    return col


def _timestamps_ms(batch: pa.RecordBatch) -> Any:
    """The ``timestamp`` column as int64 milliseconds (None when there is none)."""
    import pyarrow as pa

    if "timestamp" not in batch.schema.names:
        return None
    col = batch.column("timestamp")
    if pa.types.is_timestamp(col.type):  # finer than milliseconds: cut to them, as Kafka's timestamps are
        return col.cast(pa.timestamp("ms", col.type.tz), safe=False)
    if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):  # pandas: ints with a None are floats
        try:
            return col.cast(pa.int64())
        except pa.ArrowInvalid as exc:
            raise ValueError(f"the timestamp column must hold whole milliseconds: {exc}") from None
    raise ValueError(f"the timestamp column must be a timestamp or int64 milliseconds, got {col.type}")


def send_rows(producer: Any, topic_opt: str | None, batches: Iterable[pa.RecordBatch], *,
              timestamps: bool = False) -> tuple[int, list[Any]]:
    """Produce every row (key, value, optional topic/partition/headers columns, and with ``timestamps``
    the timestamp column) through ``Producer.send_batch``, one call per Arrow batch (and topic): the row
    count and the futures (one per record batch) to check once flushed. ``topic_opt`` wins over a topic
    column. Bad columns raise ``ValueError``."""
    import pyarrow.compute as pc

    n = 0
    futures: list[Any] = []
    for batch in batches:
        cols = batch.schema.names
        if "value" not in cols:
            raise ValueError("the DataFrame needs a value column")
        if not batch.num_rows:
            continue
        values = binary_column(batch, "value")
        keys = binary_column(batch, "key")
        parts = batch.column("partition") if "partition" in cols else None
        hdrs = batch.column("headers") if "headers" in cols else None
        stamps = _timestamps_ms(batch) if timestamps else None
        topics = batch.column("topic") if "topic" in cols and not topic_opt else None
        if topics is None and not topic_opt:
            raise ValueError("give option topic or a topic column")
        if topics is None:
            groups: list[tuple[str, Any]] = [(topic_opt, None)]  # type: ignore[list-item]
        else:
            if topics.null_count:
                raise ValueError("the topic column has a null: give every row a topic")
            names = pc.unique(topics).to_pylist()
            groups = [(t, None) if len(names) == 1 else (t, pc.equal(topics, t)) for t in names]
        for topic, mask in groups:
            def pick(col: Any, mask: Any = mask) -> Any:
                return col if col is None or mask is None else pc.filter(col, mask)
            futures += producer.send_batch(topic, pick(values), keys=pick(keys), headers=pick(hdrs),
                                           partition=pick(parts), timestamps=pick(stamps))
        n += batch.num_rows
    return n, futures

