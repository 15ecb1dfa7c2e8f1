"""``tidelog bench txn``: the transactional producer's cost against a running cluster (issue 22).

1. A transactional producer sends ``--records`` records (per run) of ``--record-size`` bytes to a new topic,
   committing every ``--commit-interval-ms`` (Kafka's benchmark of transactions used 100 ms): records/s,
   MB/s, transactions/s (one producer, so one transactional id: the rate one coordinator gives it) and the
   commit latency — the ``commit_transaction()`` call after the transaction's records were flushed, i.e. the
   EndTxn round trip to the coordinator (``flush_commit_ms``: flush and commit together, what an
   application that does not flush first waits).
2. The idempotent producer (``acks=all``, same batching) sends the same count to a second new topic: the
   ratio of the two throughputs (goal: at least 0.9, Kafka reports about 3 % overhead at 100 ms).
   ``--rounds`` pairs of runs, each run on a new topic, in the order T I, I T, T I, ... (ABBA: neither
   producer always goes first, on a colder process and broker, or second, after the other's writes);
   the figures add the runs up (records over seconds), and each pair's ratio is listed too.
3. The transactional topic is read from the beginning with ``read_uncommitted`` and ``read_committed``, twice
   each in the order U, C, C, U (so neither gains from going second): the ratio of the two consume rates
   (goal: at least 0.95).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import click

from shared.cli.bench import _ensure_topic, percentiles
from shared.cli.connect import bootstrap_servers, client_settings, cluster_options
from shared.client import Admin, Consumer, Producer, TopicPartition
from shared.errors import TidelogError

#: goals of issue 22: transactional throughput vs idempotent, read_committed vs read_uncommitted
PRODUCE_GOAL, CONSUME_GOAL = 0.9, 0.95


def rates(records: int, record_size: int, seconds: float) -> dict[str, float]:
    """records/s and MB/s (10^6 bytes) of ``records`` records of ``record_size`` bytes in ``seconds``."""
    if seconds <= 0:
        return {"records_per_s": 0.0, "mb_per_s": 0.0}
    return {"records_per_s": records / seconds, "mb_per_s": records * record_size / seconds / 1e6}


def ratio(a: float, b: float) -> float:
    """a / b, 0 when b is 0."""
    return a / b if b else 0.0


def txn_produce(servers: str, topic: str, records: int, record_size: int, commit_interval_ms: int,
                linger_ms: int, batch_size: int, transactional_id: str, retry_backoff_ms: int = 100) -> dict[str, Any]:
    values = [os.urandom(record_size) for _ in range(256)]
    producer = Producer(servers, transactional_id=transactional_id, linger_ms=linger_ms, batch_size=batch_size,
                        max_request_size=max(4 * batch_size, 4 << 20), retry_backoff_ms=retry_backoff_ms)
    commit_ms: list[float] = []
    flush_commit_ms: list[float] = []
    try:
        producer.init_transactions()
        producer.partitions_for(topic)  # metadata before the clock starts, as for the idempotent run
        send = producer.send
        interval = commit_interval_ms / 1000
        t0 = time.perf_counter()
        i = 0
        while i < records:
            producer.begin_transaction()
            started = time.perf_counter()
            while i < records and time.perf_counter() - started < interval:
                for _ in range(min(64, records - i)):  # check the clock every 64 sends
                    send(topic, values[i & 255])
                    i += 1
            t_flush = time.perf_counter()
            producer.flush()
            t_commit = time.perf_counter()
            producer.commit_transaction()
            done = time.perf_counter()
            commit_ms.append((done - t_commit) * 1000)
            flush_commit_ms.append((done - t_flush) * 1000)
        elapsed = time.perf_counter() - t0
    finally:
        producer.close()
    return {"records": records, "seconds": elapsed, **rates(records, record_size, elapsed),
            "transactions": len(commit_ms), "transactions_per_s": len(commit_ms) / elapsed,
            "commit_latency_ms": percentiles(commit_ms), "flush_commit_ms": percentiles(flush_commit_ms),
            "_commit_latency_ms": commit_ms, "_flush_commit_ms": flush_commit_ms}


def idempotent_produce(servers: str, topic: str, records: int, record_size: int, linger_ms: int,
                       batch_size: int) -> dict[str, Any]:
    values = [os.urandom(record_size) for _ in range(256)]
    producer = Producer(servers, acks="all", enable_idempotence=True, linger_ms=linger_ms, batch_size=batch_size,
                        max_request_size=max(4 * batch_size, 4 << 20))
    try:
        producer.partitions_for(topic)
        send = producer.send
        t0 = time.perf_counter()
        for i in range(records):
            send(topic, values[i & 255])
        producer.flush()
        elapsed = time.perf_counter() - t0
    finally:
        producer.close()
    return {"records": records, "seconds": elapsed, **rates(records, record_size, elapsed)}


def consume(servers: str, topic: str, records: int, isolation_level: str, timeout_s: float = 30) -> dict[str, Any]:
    consumer = Consumer(servers, auto_offset_reset="earliest", isolation_level=isolation_level,
                        fetch_max_bytes=64 << 20, max_partition_fetch_bytes=1 << 20, max_poll_records=500)
    n = nbytes = 0
    try:
        parts = consumer.cluster.partitions_for(topic, 10)
        consumer.assign([TopicPartition(topic, p) for p in sorted(parts)])
        consumer.seek_to_beginning()
        t0 = idle = time.perf_counter()
        while n < records:
            batch = consumer.poll(100)
            if not batch:
                if time.perf_counter() - idle > timeout_s:
                    raise click.ClickException(f"{isolation_level}: only {n} of {records} records arrived")
                continue
            idle = time.perf_counter()
            for r in batch:
                nbytes += len(r.value or b"")
                n += 1
        elapsed = time.perf_counter() - t0
    finally:
        consumer.close()
    return {"records": n, "seconds": elapsed, "records_per_s": n / elapsed, "mb_per_s": nbytes / elapsed / 1e6}


def combined(runs: list[dict[str, Any]], record_size: int) -> dict[str, Any]:
    """Several runs of one producer as one: records and seconds added up; for transactional runs, the
    transactions too, and the latency percentiles of every commit of every run."""
    records = sum(r["records"] for r in runs)
    seconds = sum(r["seconds"] for r in runs)
    out: dict[str, Any] = {"records": records, "seconds": seconds, **rates(records, record_size, seconds)}
    if runs and "transactions" in runs[0]:
        out["transactions"] = sum(r["transactions"] for r in runs)
        out["transactions_per_s"] = out["transactions"] / seconds if seconds else 0.0
        for key in ("commit_latency_ms", "flush_commit_ms"):
            out[key] = percentiles([x for r in runs for x in r[f"_{key}"]])
    return out


def _line(name: str, res: dict[str, Any]) -> str:
    return f"{name}: {res['records']} records, {res['records_per_s']:,.0f} records/sec ({res['mb_per_s']:.2f} MB/sec)"


@click.command("txn")
@click.option("--records", type=click.IntRange(1), default=500_000, show_default=True)
@click.option("--record-size", type=click.IntRange(0), default=1024, show_default=True)
@click.option("--commit-interval-ms", type=click.IntRange(1), default=100, show_default=True,
              help="commit the transaction this often")
@click.option("--linger-ms", type=click.IntRange(0), default=5, show_default=True)
@click.option("--batch-size", type=click.IntRange(1), default=1_048_576, show_default=True)
@click.option("--partitions", type=click.IntRange(1), default=1, show_default=True, help="of the topics created")
@click.option("--replication-factor", type=click.IntRange(1), default=1, show_default=True)
@click.option("--topic-prefix", default="bench-txn", show_default=True, help="new topics PREFIX-<random>-txn|-idem")
@click.option("--transactional-id", default=None, help="[default: bench-txn-<random>]")
@click.option("--retry-backoff-ms", type=click.IntRange(0), default=100, show_default=True,
              help="the transactional producer's retry.backoff.ms (a batch refused while its leader could not add "
                   "the partition to the transaction, the coordinator still busy with the previous one past the "
                   "leader's own retries, is sent again after it)")
@click.option("--rounds", type=click.IntRange(1), default=2, show_default=True,
              help="pairs of transactional and idempotent runs, alternating which goes first")
@click.option("--skip-baseline", is_flag=True, help="only the transactional producer (no idempotent run, no consume)")
@click.option("--keep-topics", is_flag=True, help="keep the topics the runs created (deleted at the end by default)")
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def bench_txn(records: int, record_size: int, commit_interval_ms: int, linger_ms: int, batch_size: int,
              partitions: int, replication_factor: int, topic_prefix: str, transactional_id: str | None,
              retry_backoff_ms: int, rounds: int, skip_baseline: bool, keep_topics: bool, as_json: bool,
              bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Transactional producer throughput, commit latency and transactions/s, against the idempotent producer
    for the same records, and read_committed against read_uncommitted consume."""
    servers = bootstrap_servers(bootstrap, rest, data_dir)
    run = uuid.uuid4().hex[:8]
    res: dict[str, Any] = {"record_size": record_size, "commit_interval_ms": commit_interval_ms, "topics": []}
    txn_runs: list[dict[str, Any]] = []
    idem_runs: list[dict[str, Any]] = []

    def produce(kind: str, k: int) -> None:
        topic = f"{topic_prefix}-{run}-{kind}" + (f"-{k}" if k else "")
        _ensure_topic(servers, topic, partitions, replication_factor, batch_size)
        res["topics"].append(topic)
        if kind == "txn":
            txn_runs.append(txn_produce(servers, topic, records, record_size, commit_interval_ms, linger_ms,
                                        batch_size, (transactional_id or f"bench-txn-{run}") + (f"-{k}" if k else ""),
                                        retry_backoff_ms))
        else:
            idem_runs.append(idempotent_produce(servers, topic, records, record_size, linger_ms, batch_size))

    with _deleted_after(servers, res["topics"], keep_topics):
        for k in range(rounds):
            kinds = ("txn",) if skip_baseline else ("txn", "idem") if k % 2 == 0 else ("idem", "txn")
            for kind in kinds:
                produce(kind, k)
        txn_topic = res["topics"][0]
        res["transactional"] = combined(txn_runs, record_size)
        if not skip_baseline:
            res["idempotent"] = combined(idem_runs, record_size)
            res["produce_ratio"] = ratio(res["transactional"]["records_per_s"], res["idempotent"]["records_per_s"])
            res["produce_ratios"] = [ratio(t["records_per_s"], i["records_per_s"]) for t, i in zip(txn_runs, idem_runs)]
            runs: dict[str, list[dict[str, Any]]] = {"read_uncommitted": [], "read_committed": []}
            for level in ("read_uncommitted", "read_committed", "read_committed", "read_uncommitted"):  # no order bias
                runs[level].append(consume(servers, txn_topic, records, level))
            for level, pair in runs.items():
                secs = sum(r["seconds"] for r in pair)
                res[level] = {"records": records, "seconds": secs / 2, **rates(2 * records, record_size, secs)}
            res["consume_ratio"] = ratio(res["read_committed"]["records_per_s"],
                                         res["read_uncommitted"]["records_per_s"])
    _print(res, skip_baseline, as_json)


@contextlib.contextmanager
def _deleted_after(servers: str, topics: list[str], keep: bool) -> Iterator[None]:
    """The runs' topics (each holds --records records) are deleted at the end, unless ``keep``: repeated
    runs do not fill the disk."""
    try:
        yield
    finally:
        if not keep:
            _delete_topics(servers, topics)


def _delete_topics(servers: str, topics: list[str]) -> None:
    admin = Admin(servers, **client_settings())
    try:
        for topic in topics:
            try:
                admin.delete_topic(topic)
            except TidelogError as exc:
                click.echo(f"topic {topic} not deleted: {exc}", err=True)
    finally:
        admin.close()


def _print(res: dict[str, Any], skip_baseline: bool, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(res))
        return
    t = res["transactional"]
    lat, fc = t["commit_latency_ms"], t["flush_commit_ms"]
    click.echo(_line("transactional", t) + f", {t['transactions']} transactions, "
               f"{t['transactions_per_s']:.1f} transactions/sec, commit latency p50 {lat['p50']:.2f} ms, "
               f"p99 {lat['p99']:.2f} ms (flush+commit p50 {fc['p50']:.2f} ms, p99 {fc['p99']:.2f} ms)")
    if skip_baseline:
        return
    click.echo(_line("idempotent", res["idempotent"]))
    click.echo(f"transactional/idempotent: {res['produce_ratio']:.3f} (goal >= {PRODUCE_GOAL}; runs: "
               + " ".join(f"{r:.3f}" for r in res["produce_ratios"]) + ")")
    click.echo(_line("read_uncommitted", res["read_uncommitted"]))
    click.echo(_line("read_committed", res["read_committed"]))
    click.echo(f"read_committed/read_uncommitted: {res['consume_ratio']:.3f} (goal >= {CONSUME_GOAL})")
