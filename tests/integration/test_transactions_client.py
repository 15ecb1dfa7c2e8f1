"""Tidelog's transactional producer on a real cluster (2 brokers, 1 coordinator, real etcd): commit and
abort seen (or not) by a read_committed consumer, with transactions V2 (the default: the leaders add the
partitions) and V1 (the client adds them); a consume-transform-produce loop whose input offsets commit
with its output; a second producer with the same transactional id fences the first."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from shared.client import (
    Admin,
    Consumer,
    FatalTransactionError,
    IllegalTransactionStateError,
    Producer,
    TopicPartition,
)
from tests.conftest import kill_cluster, start_cluster, wait_for

OUT = "txc-out"


@pytest.fixture(scope="module")
def txenv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Admin]]:
    c = start_cluster(str(tmp_path_factory.mktemp("txn-client")), controllers=1, brokers=2, coordinators=1,
                      cleaners=0, quotas=0)
    bootstrap = ",".join(p.address for p in c.procs("broker"))
    admin = Admin(bootstrap)
    try:
        admin.create_topic(OUT, partitions=2, replication_factor=2)
        yield bootstrap, admin
    finally:
        admin.close()
        kill_cluster(c)


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed",
             settle_s: float = 1.5) -> list[bytes]:
    """Every value of ``topic`` under ``isolation``, read until nothing new comes for ``settle_s``."""
    with Consumer(bootstrap, isolation_level=isolation, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        c.seek_to_beginning(*[TopicPartition(topic, p) for p in range(partitions)])
        out: list[bytes] = []
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < settle_s:
            recs = c.poll(200)
            if recs:
                out += [r.value for r in recs]
                quiet_since = time.monotonic()
        return out


def producer(bootstrap: str, txn_id: str, **kw: Any) -> Producer:
    p = Producer(bootstrap, transactional_id=txn_id, max_block_ms=30_000, **kw)
    p.init_transactions()
    return p


@pytest.mark.parametrize("version", [2, 1])
def test_commit_is_seen_and_abort_is_not(txenv: tuple[str, Admin], version: int) -> None:
    bootstrap, _ = txenv
    tag = f"v{version}"
    with producer(bootstrap, f"txc-commit-{tag}", transaction_version=version) as p:
        assert p.transaction_state == "READY"
        with pytest.raises(IllegalTransactionStateError):
            p.send(OUT, b"outside")  # a transactional producer sends only inside a transaction
        p.begin_transaction()
        futures = [p.send(OUT, f"{tag}-c{i}".encode(), partition=i % 2) for i in range(4)]
        p.commit_transaction()
        assert all(f.get(0).offset >= 0 for f in futures)
        epoch = p.producer_epoch
        p.begin_transaction()
        aborted = [p.send(OUT, f"{tag}-a{i}".encode(), partition=i % 2) for i in range(4)]
        p.flush()
        assert all(f.get(0).offset >= 0 for f in aborted)  # written, then aborted
        p.abort_transaction()
        assert p.transaction_state == "READY"
        p.begin_transaction()
        p.send(OUT, f"{tag}-after".encode(), partition=0)
        p.commit_transaction()
        if version == 2:  # the epoch moves at every EndTxn
            assert p.producer_epoch > epoch
    got = wait_for(lambda: (v := [x for x in read_all(bootstrap, OUT, 2) if x.startswith(tag.encode())])
                   and f"{tag}-after".encode() in v and v, 30, what="the committed records")
    assert sorted(got) == sorted([f"{tag}-c{i}".encode() for i in range(4)] + [f"{tag}-after".encode()])
    # read_uncommitted sees the aborted records too: they were written
    aborted_values = [f"{tag}-a{i}".encode() for i in range(4)]
    assert not set(got) & set(aborted_values)
    raw = [x for x in read_all(bootstrap, OUT, 2, "read_uncommitted") if x in aborted_values]
    assert sorted(raw) == aborted_values


def test_consume_transform_produce_commits_offsets_with_the_output(txenv: tuple[str, Admin]) -> None:
    bootstrap, admin = txenv
    src, dst, group = "ctp-in", "ctp-out", "ctp-group"
    admin.create_topic(src, partitions=1, replication_factor=2)
    admin.create_topic(dst, partitions=1, replication_factor=2)
    with Producer(bootstrap) as plain:
        for i in range(10):
            plain.send(src, f"in-{i}".encode())
    tp = TopicPartition(src, 0)

    def run_once(commit: bool, n: int) -> list[bytes]:
        """Consume up to n records, produce them transformed, commit (or abort) with the input offsets."""
        with Consumer(bootstrap, group_id=group, enable_auto_commit=False, auto_offset_reset="earliest") as c, \
                producer(bootstrap, "ctp-app") as p:
            c.subscribe([src])
            taken: list[Any] = []
            deadline = time.monotonic() + 30
            while len(taken) < n and time.monotonic() < deadline:
                taken += list(c.poll(200, max_records=n - len(taken)))
            assert len(taken) == n
            p.begin_transaction()
            for r in taken:
                p.send(dst, r.value.upper())
            p.send_offsets_to_transaction({tp: taken[-1].offset + 1}, c.group_metadata())
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
            return [r.value for r in taken]

    first = run_once(True, 4)
    assert first == [f"in-{i}".encode() for i in range(4)]
    aborted = run_once(False, 3)  # aborted: neither its output nor its offsets count
    assert aborted == [f"in-{i}".encode() for i in range(4, 7)]
    again = run_once(True, 6)  # resumes where the committed transaction left off
    assert again == [f"in-{i}".encode() for i in range(4, 10)]
    out = wait_for(lambda: (v := read_all(bootstrap, dst, 1)) and len(v) >= 10 and v, 30, what="the output")
    assert out == [f"IN-{i}".encode() for i in range(10)]  # exactly once, in order
    with Consumer(bootstrap, group_id=group, enable_auto_commit=False) as c:
        assert c.committed([tp]) == {tp: 10}


def test_a_second_producer_with_the_same_id_fences_the_first(txenv: tuple[str, Admin]) -> None:
    bootstrap, _ = txenv
    old = producer(bootstrap, "txc-fence")
    try:
        old.begin_transaction()
        old.send(OUT, b"zombie-1", partition=0).get(30)
        new = producer(bootstrap, "txc-fence")  # bumps the epoch and aborts old's transaction
        try:
            with pytest.raises(FatalTransactionError) as info:
                old.send(OUT, b"zombie-2", partition=1)
                old.commit_transaction()
            assert info.value.fatal and info.value.code in (47, 90)  # INVALID_PRODUCER_EPOCH / PRODUCER_FENCED
            assert old.transaction_state == "FATAL_ERROR"
            with pytest.raises(FatalTransactionError):  # every later call raises it again
                old.begin_transaction()
            new.begin_transaction()
            new.send(OUT, b"survivor", partition=1)
            new.commit_transaction()
        finally:
            new.close()
    finally:
        old.close()
    got = wait_for(lambda: (v := read_all(bootstrap, OUT, 2)) and b"survivor" in v and v, 30, what="survivor")
    assert b"zombie-1" not in got and b"zombie-2" not in got
