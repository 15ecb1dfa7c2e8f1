"""``Producer.send_batch`` without a cluster (the sender thread not started, the partition count given):
its batches hold the bytes ``send()`` of each row would have queued, in the same partitions; bad input
fails before anything is queued."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.client import IllegalTransactionStateError
from shared.client.producer import Producer
from shared.client.sender import Sender
from shared.errors import RecordTooLargeError
from shared.records.compression import CompressionType
from shared.types import TopicPartition

TOPIC = "t"


def stub_producer(partitions: int, **kw: object) -> Producer:
    start = Sender.start
    Sender.start = lambda self: None  # type: ignore[method-assign]
    try:
        p = Producer("127.0.0.1:1", **{"acks": 1, "linger_ms": 5, **kw})  # type: ignore[arg-type]
    finally:
        Sender.start = start  # type: ignore[method-assign]
    p._partition_counts[TOPIC] = partitions
    return p


def shut(p: Producer) -> None:
    p._closing = True
    p.cluster.close()


@pytest.fixture
def producers() -> Iterator[list[Producer]]:
    made: list[Producer] = []
    yield made
    for p in made:
        shut(p)


def queued(p: Producer, compression: CompressionType = CompressionType.NONE) -> dict[int, list[bytes]]:
    """Every queued batch, encoded as the sender would (producer id 9, epoch 2, sequence 0)."""
    out: dict[int, list[bytes]] = {}
    for tp, dq in p.accumulator.batches.items():
        for b in dq:
            h, r = b.encode(compression, producer_id=9, producer_epoch=2, base_sequence=0)
            out.setdefault(tp.partition, []).append(h + r)
    return out


key_st = st.binary(min_size=0, max_size=12)
row_st = st.tuples(st.one_of(st.none(), st.binary(max_size=300)), key_st,
                   st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=4), st.binary(max_size=4)), max_size=2)),
                   st.integers(1_600_000_000_000, 1_600_000_100_000))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(rows=st.lists(row_st, min_size=1, max_size=60), partitions=st.integers(1, 5),
       explicit=st.booleans(), batch_size=st.sampled_from([200, 1000, 16_384]),
       compression=st.sampled_from([CompressionType.NONE, CompressionType.LZ4]))
def test_same_batches_and_partitions_as_send(producers, rows, partitions, explicit, batch_size, compression) -> None:
    a = stub_producer(partitions, batch_size=batch_size)
    b = stub_producer(partitions, batch_size=batch_size)
    producers += [a, b]
    parts = [i % partitions for i in range(len(rows))] if explicit else None
    for i, (value, key, headers, ts) in enumerate(rows):
        a.send(TOPIC, value, key=key, headers=headers, timestamp=ts, partition=parts[i] if parts else None)
    values = pa.array([r[0] for r in rows], pa.binary())
    keys = pa.array([r[1] for r in rows], pa.binary())
    futures = b.send_batch(TOPIC, values, keys=keys, headers=[r[2] for r in rows],
                           timestamps=np.array([r[3] for r in rows]), partition=parts)
    assert queued(b, compression) == queued(a, compression)
    assert len(futures) == sum(len(dq) for dq in b.accumulator.batches.values())
    assert sorted(int(i) for f in futures for i in f.rows) == list(range(len(rows)))
    for f in futures:  # each future's rows are its batch's records, in offset order
        assert (np.diff(f.rows) > 0).all()


def test_null_keys_go_to_the_sticky_partition_batch_by_batch(producers) -> None:
    p = stub_producer(4, batch_size=1000)
    producers.append(p)
    futures = p.send_batch(TOPIC, [b"x" * 100] * 50)
    assert len(futures) > 4
    runs = sorted((int(f.rows[0]), f.topic_partition.partition) for f in futures)
    used = [part for _, part in runs]  # the batches in row order: each on another partition than the last
    assert all(x != y for x, y in zip(used, used[1:], strict=False))
    assert len(set(used)) > 1


def test_records_queued_in_call_order_with_send(producers) -> None:
    p = stub_producer(1, batch_size=1 << 20)
    producers.append(p)
    f1 = p.send(TOPIC, b"before", timestamp=1)
    p.send_batch(TOPIC, [b"a", b"b"], timestamps=[2, 3])
    f3 = p.send(TOPIC, b"after", timestamp=4)
    dq = p.accumulator.batches[TopicPartition(TOPIC, 0)]
    assert [b.count for b in dq] == [1, 2, 1]
    assert dq[0].sealed and dq[1].sealed and not dq[2].sealed
    assert f1._result is dq[0].result and f3._result is dq[2].result
    assert p.accumulator.buffered == sum(b.size - 61 for b in dq)


def test_mismatched_lengths_and_bad_types(producers) -> None:
    p = stub_producer(2)
    producers.append(p)
    with pytest.raises(ValueError, match="keys"):
        p.send_batch(TOPIC, [b"a", b"b"], keys=[b"k"])
    with pytest.raises(ValueError, match="headers"):
        p.send_batch(TOPIC, [b"a", b"b"], headers=[None])
    with pytest.raises(ValueError, match="timestamps"):
        p.send_batch(TOPIC, [b"a", b"b"], timestamps=[1, 2, 3])
    with pytest.raises(ValueError, match="partition"):
        p.send_batch(TOPIC, [b"a", b"b"], partition=[0])
    with pytest.raises(TypeError):
        p.send_batch(TOPIC, np.arange(3))
    with pytest.raises(TypeError):
        p.send_batch(TOPIC, b"not a column")
    assert not p.accumulator.batches
    assert p.send_batch(TOPIC, []) == []


def test_record_larger_than_max_request_size_fails_as_send_does(producers) -> None:
    p = stub_producer(1, batch_size=1000, max_request_size=2000)
    producers.append(p)
    big = b"x" * 3000
    with pytest.raises(RecordTooLargeError) as from_send:
        p.send(TOPIC, big)
    with pytest.raises(RecordTooLargeError) as from_batch:
        p.send_batch(TOPIC, [b"small", big])
    assert str(from_batch.value) == str(from_send.value)
    assert from_batch.value.code == from_send.value.code
    assert not p.accumulator.batches  # nothing queued, not even the small row
    # between batch.size and max.request.size: a batch of its own
    (f,) = p.send_batch(TOPIC, [b"y" * 1500])
    assert f.record_count == 1


def test_transactional_producer_outside_a_transaction_refuses_as_send(producers) -> None:
    p = stub_producer(1, acks="all", transactional_id="tx")
    producers.append(p)
    with pytest.raises(IllegalTransactionStateError):
        p.send(TOPIC, b"x")
    with pytest.raises(IllegalTransactionStateError):
        p.send_batch(TOPIC, [b"x"])
    assert not p.accumulator.batches


def test_closed_producer(producers) -> None:
    p = stub_producer(1)
    producers.append(p)
    p._closing = True
    with pytest.raises(RuntimeError):
        p.send_batch(TOPIC, [b"x"])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=300)), st.one_of(st.none(), key_st),
                               st.integers(0, 2**45)), min_size=1, max_size=40))
def test_send_queues_the_same_bytes_with_and_without_the_compiled_encoder(producers, monkeypatch, rows) -> None:
    import shared.client.producer as producer_module

    def run(compiled: bool) -> dict[int, list[bytes]]:
        with monkeypatch.context() as m:
            if not compiled:
                m.setattr(producer_module, "compiled_append", None)
            p = stub_producer(1, batch_size=2000)
            producers.append(p)
            for value, key, ts in rows:
                p.send(TOPIC, value, key=key, timestamp=ts)
            return queued(p)

    assert producer_module.compiled_append is not None
    assert run(True) == run(False)


def test_timestamps_negative_narrow_and_zoned(producers) -> None:
    p = stub_producer(1)
    producers.append(p)
    # Kafka's ProducerRecord refuses a negative timestamp, for send() and for a column alike.
    with pytest.raises(ValueError, match="Invalid timestamp: -5"):
        p.send(TOPIC, b"v", timestamp=-5)
    with pytest.raises(ValueError, match="Invalid timestamp: -5"):
        p.send_batch(TOPIC, [b"a", b"b"], timestamps=[1, -5])
    assert not p.accumulator.batches
    # A 32-bit column with nulls: the nulls become now (which does not fit 32 bits), the rest as given.
    from shared.client.send_batch import _timestamps

    ts = _timestamps(pa.array([7, None], pa.int32()), 2)
    assert ts[0] == 7 and ts[1] > 1_600_000_000_000
    # A zoned timestamp column: the instant, cut to milliseconds.
    zoned = pa.array([1_700_000_000_123_456], pa.timestamp("us", "Europe/Paris"))
    assert _timestamps(zoned, 1).tolist() == [1_700_000_000_123]


def test_polars_columns_give_the_bytes_of_send(producers) -> None:
    """Polars hands Arrow over through the PyCapsule interface, in view layouts (binary_view, string_view)."""
    import polars as pl

    a, b = stub_producer(2), stub_producer(2)
    producers.extend([a, b])
    df = pl.DataFrame({"key": ["a", "b", None], "value": [b"x", b"y", b"z"], "partition": [0, 1, 1],
                       "headers": [[{"key": "h", "value": b"1"}], [], None], "ts": [5, 6, 7]})
    a.send_batch(TOPIC, df["value"], keys=df["key"], headers=df["headers"], partition=df["partition"],
                 timestamps=df["ts"])
    for row in df.iter_rows(named=True):
        b.send(TOPIC, row["value"], key=None if row["key"] is None else row["key"].encode(),
               headers=[(h["key"], h["value"]) for h in row["headers"] or []] or None,
               partition=row["partition"], timestamp=row["ts"])
    assert queued(a) == queued(b)


def test_a_partition_column_of_nulls_gives_none(producers) -> None:
    a, b = stub_producer(3), stub_producer(3)
    producers.extend([a, b])
    a.send_batch(TOPIC, [b"a", b"b"], keys=[b"k1", b"k2"], partition=pa.nulls(2), timestamps=[1, 2])
    b.send_batch(TOPIC, [b"a", b"b"], keys=[b"k1", b"k2"], timestamps=[1, 2])
    assert queued(a) == queued(b)


def test_timestamps_as_pandas_and_python_times(producers) -> None:
    import datetime as dt

    import pandas as pd

    def sent(**kw: object) -> dict[int, list[bytes]]:
        p = stub_producer(1)
        producers.append(p)
        p.send_batch(TOPIC, [b"1", b"2"], **kw)  # type: ignore[arg-type]
        return queued(p)

    b = stub_producer(1)
    producers.append(b)
    b.send(TOPIC, b"1", timestamp=1767225600123)
    b.send(TOPIC, b"2", timestamp=1767225601000)
    assert sent(timestamps=pd.Series(pd.to_datetime(["2026-01-01T00:00:00.123Z", "2026-01-01T00:00:01.000Z"]))) \
        == queued(b)
    assert sent(timestamps=[dt.datetime(2026, 1, 1, 0, 0, 0, 123000), dt.datetime(2026, 1, 1, 0, 0, 1)]) == queued(b)
    assert sent(timestamps=[1767225600123.0, 1767225601000]) == queued(b)
    with pytest.raises(ValueError, match="whole milliseconds"):  # as write_arrow refuses them
        sent(timestamps=[1767225600000.7, 1])


def test_polars_categorical_and_enum_keys(producers) -> None:
    import polars as pl

    keys = ["c1", "c2", "c1", "c3"]
    b = stub_producer(3)
    producers.append(b)
    for k in keys:
        b.send(TOPIC, b"v", key=k.encode(), timestamp=1)
    for dtype in (pl.Categorical, pl.Enum(["c1", "c2", "c3"])):
        a = stub_producer(3)
        producers.append(a)
        a.send_batch(TOPIC, [b"v"] * 4, keys=pl.Series(keys).cast(dtype), timestamps=1)
        assert queued(a) == queued(b)
