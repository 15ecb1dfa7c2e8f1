"""``Producer.send_batch`` on a real cluster (1 broker, 1 coordinator, real etcd): a keyed Arrow column
read back whole by a normal Consumer, in the partitions ``send`` would pick; a transactional producer's
send_batch committed (seen by read_committed) and aborted (not seen)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

from shared.client import Admin, Consumer, Producer, TopicPartition, partition_for_key
from tests.conftest import kill_cluster, start_cluster

TOPIC = "sb-plain"
TXN_TOPIC = "sb-txn"


@pytest.fixture(scope="module")
def sbenv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    c = start_cluster(str(tmp_path_factory.mktemp("send-batch")), controllers=1, brokers=1, coordinators=1,
                      cleaners=0, quotas=0)
    bootstrap = ",".join(p.address for p in c.procs("broker"))
    admin = Admin(bootstrap)
    try:
        admin.create_topic(TOPIC, partitions=3, replication_factor=1)
        admin.create_topic(TXN_TOPIC, partitions=2, replication_factor=1)
        yield bootstrap
    finally:
        admin.close()
        kill_cluster(c)


def read_all(bootstrap: str, topic: str, partitions: int, expect: int, isolation: str = "read_uncommitted",
             settle_s: float = 1.0) -> list[tuple[int, bytes | None, bytes | None, list]]:
    """(partition, key, value, headers) of every record, read until ``expect`` came and nothing more for
    ``settle_s`` (or 20 s passed)."""
    with Consumer(bootstrap, isolation_level=isolation, auto_offset_reset="earliest") as c:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out: list[tuple[int, bytes | None, bytes | None, list]] = []
        quiet_since = time.monotonic()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (len(out) < expect or time.monotonic() - quiet_since < settle_s):
            recs = c.poll(200)
            if recs:
                out += [(r.partition, r.key, r.value, list(r.headers or [])) for r in recs]
                quiet_since = time.monotonic()
        return out


def test_send_batch_read_back_by_consumer(sbenv: str) -> None:
    n = 5_000
    keys = pa.array([f"k{i % 97}".encode() for i in range(n)], type=pa.binary())
    values = pa.array([f"v{i}".encode() * (1 + i % 5) for i in range(n)], type=pa.binary())
    headers = [[("h", str(i).encode())] if i % 10 == 0 else None for i in range(n)]
    with Producer(sbenv, acks="all", batch_size=16_384, linger_ms=5) as p:
        futures = p.send_batch(TOPIC, values, keys=keys, headers=headers)
        p.flush()
        mds = [f.get(10) for f in futures]
        assert len(futures) > 3  # batch.size cut the rows into several batches
        assert sum(md.record_count for md in mds) == n
        assert all(md.base_offset >= 0 for md in mds)
        # one send() after it lands behind it, in the same partition order
        last = p.send(TOPIC, b"after", key=b"k0").get(10)
        assert last.partition == partition_for_key(b"k0", 3)
    got = read_all(sbenv, TOPIC, 3, n + 1)
    assert len(got) == n + 1
    by_value = {v: (part, k, h) for part, k, v, h in got}
    for i in range(n):
        part, k, h = by_value[values[i].as_py()]
        assert k == keys[i].as_py()
        assert part == partition_for_key(k, 3)
        assert h == (headers[i] or [])
    # offsets per partition follow the future's rows
    md0, f0 = mds[0], futures[0]
    assert md0.record_count == len(f0.rows)


@pytest.mark.parametrize("commit", [True, False])
def test_transactional_send_batch(sbenv: str, commit: bool) -> None:
    tag = "c" if commit else "a"
    n = 2_000
    values = [f"{tag}{i}".encode() for i in range(n)]
    with Producer(sbenv, transactional_id=f"sb-txn-{tag}", max_block_ms=30_000) as p:
        p.init_transactions()
        p.begin_transaction()
        futures = p.send_batch(TXN_TOPIC, values, partition=[i % 2 for i in range(n)])
        assert p.producer_id >= 0
        if commit:
            p.commit_transaction()
            assert sum(f.get(10).record_count for f in futures) == n
        else:
            p.flush()
            p.abort_transaction()
    got = read_all(sbenv, TXN_TOPIC, 2, n if commit else 0, isolation="read_committed")
    mine = sorted(v for _, _, v, _ in got if v and v.startswith(tag.encode()))
    assert mine == (sorted(values) if commit else [])
