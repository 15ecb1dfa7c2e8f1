"""Hypothesis properties of compaction on the real log in a temporary directory.

Random keyed workloads with deletes (tombstones), idempotent-producer batches, clock jumps and
cleanings (full or partial offset maps); after every cleaning, and after reopening the log:
offsets unchanged and ordered, every record identical to what was appended at its offset, the
final value of every key visible from the start, no superseded record below the cleaned point,
the head (past the cleaned point) complete, tombstones kept for delete.retention.ms after the
first cleaning that rewrote them (KIP-534's delete horizon, set as Kafka sets it), and a fetch at a compacted-away offset returning the next record.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.broker.log import PartitionLog
from services.broker.log.compaction import clean_in_process, read_cleaner_checkpoint
from shared.config import LogConfig
from shared.records.builder import encode_batch
from shared.records.decoder import decode_records, records_section
from shared.records.header import BatchHeader, iter_batches
from shared.records.record import Record

T0 = 1_700_000_000_000
RETENTION = 10_000  # delete.retention.ms
KEYS = [b"k%d" % i for i in range(6)]

Row = tuple[int, bytes, bytes | None]  # (timestamp, key, value)

batch_st = st.tuples(
    st.lists(st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(min_size=1, max_size=30))),
             min_size=1, max_size=4),
    st.booleans(),  # from the idempotent producer
)
op_st = st.one_of(
    st.tuples(st.just("append"), batch_st),
    st.tuples(st.just("tick"), st.integers(min_value=1, max_value=RETENTION)),
    st.tuples(st.just("clean"), st.sampled_from([24 * 8, 24 * 64, 1 << 20])),  # dedupe buffer bytes
)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


@dataclass
class Model:
    rows: dict[int, Row] = field(default_factory=dict)  # every record ever appended, by offset
    first_cleaned: dict[int, int] = field(default_factory=dict)  # tombstone offset -> first cleaning time
    last_clean: dict[int, int] = field(default_factory=dict)  # tombstone offset -> latest cleaning time
    map_end: int = 0
    clean_times: set[int] = field(default_factory=set)
    pid_seq: int = 0
    pid_last: int = -1


def batches(log: PartitionLog, start: int | None = None) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Every batch from ``start`` (the log start by default) with its records (none for control batches),
    read as a consumer reads them."""
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 16).records
        if not data:
            break
        for pos, h in iter_batches(data):
            offset = h.next_offset
            yield h, [] if h.is_control else decode_records(h, records_section(data, h, pos))


def read_log(log: PartitionLog, start: int | None = None) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(r.offset, r.timestamp, r.key, r.value) for _, rs in batches(log, start) for r in rs]


def append(log: PartitionLog, model: Model, clock: Clock, rows: list[tuple[bytes, bytes | None]], idem: bool) -> None:
    fields = {}
    if idem:
        fields = {"producer_id": 1, "producer_epoch": 0, "base_sequence": model.pid_seq}
        model.pid_seq += len(rows)
    info = log.append_as_leader(encode_batch([(clock.now, k, v, None) for k, v in rows], **fields))
    for i, (k, v) in enumerate(rows):
        model.rows[info.first_offset + i] = (clock.now, k, v)
    if idem:
        model.pid_last = info.last_offset


def tombstone_horizons(log: PartitionLog) -> dict[int, int]:
    """The delete horizon of every tombstone in a batch that has one (KIP-534)."""
    return {r.offset: h.base_timestamp for h, rs in batches(log) if h.has_delete_horizon for r in rs if r.value is None}


def clean(log: PartitionLog, model: Model, clock: Clock, buffer: int) -> None:
    lasts = {model.pid_last} if model.pid_last >= 0 else set()
    result = clean_in_process(log, "t-0", log.log_end_offset, clock.now, lasts, buffer, force=True)
    if result is None:
        return
    model.clean_times.add(clock.now)
    model.map_end = result.map_end
    # As Kafka's cleaner, a cleaning gives every batch it rewrites that keeps tombstones a delete horizon
    # (now + delete.retention.ms), also one past the offset map's end in a cleaned segment: a tombstone's
    # retention starts at the first cleaning that rewrote it, which may be before the map covered it.
    for off, horizon in tombstone_horizons(log).items():
        assert horizon - RETENTION in model.clean_times, f"tombstone at {off}: horizon {horizon} set by no cleaning"
        model.first_cleaned.setdefault(off, horizon - RETENTION)
        model.last_clean[off] = clock.now
    for off in range(result.map_end):
        row = model.rows.get(off)
        if row is not None and row[2] is None:
            model.first_cleaned.setdefault(off, clock.now)
            model.last_clean[off] = clock.now


def check(log: PartitionLog, model: Model, clock: Clock) -> None:
    got = read_log(log)
    offsets = [o for o, *_ in got]
    assert offsets == sorted(set(offsets))
    for o, ts, k, v in got:
        assert model.rows[o] == (ts, k, v), f"record at {o} changed"
    present = set(offsets)
    latest: dict[bytes, int] = {}
    for o in sorted(model.rows):
        latest[model.rows[o][1]] = o
    for key, o in latest.items():  # the final value of every key
        value = model.rows[o][2]
        if value is not None or o not in model.first_cleaned:
            assert o in present, f"latest record of {key!r} at {o} is missing"
        elif model.last_clean[o] < model.first_cleaned[o] + RETENTION:
            assert o in present, f"tombstone at {o} went before delete.retention.ms"
    end = model.map_end
    below: dict[bytes, int] = {}
    for o in sorted(x for x in model.rows if x < end):
        below[model.rows[o][1]] = o
    for o in present:
        if o < end:
            assert below[model.rows[o][1]] == o, f"superseded record at {o} below the cleaned point {end}"
    assert [o for o in sorted(model.rows) if o >= end] == [o for o in offsets if o >= end]  # the head is whole
    for o in range(log.log_start_offset, log.log_end_offset):
        if o not in present:
            rest = [r for r in read_log(log, o) if r[0] >= o]  # a consumer skips the batch's earlier records
            nxt = min((p for p in present if p > o), default=None)
            assert (rest[0][0] if rest else None) == nxt, f"fetch at compacted-away {o}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op_st, min_size=1, max_size=40))
def test_compaction_properties(ops) -> None:
    clock = Clock()
    model = Model()
    cfg = LogConfig.from_topic_configs({"segment.bytes": "260", "cleanup.policy": "compact",
                                        "delete.retention.ms": str(RETENTION), "file.delete.delay.ms": "0"})
    with tempfile.TemporaryDirectory() as tmp:
        log = PartitionLog(f"{tmp}/t-0", cfg, clock)
        for kind, arg in ops:
            if kind == "append":
                append(log, model, clock, *arg)
            elif kind == "tick":
                clock.now += arg
            else:
                clean(log, model, clock, arg)
                check(log, model, clock)
        check(log, model, clock)
        log.close()
        reopened = PartitionLog(f"{tmp}/t-0", cfg, clock)
        assert read_cleaner_checkpoint(reopened) in (None, model.map_end)
        check(reopened, model, clock)
        reopened.close()
        log.wait_for_rolled_flush()
        reopened.wait_for_rolled_flush()
