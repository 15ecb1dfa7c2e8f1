"""The ``tidelog`` sink: batch (``df.write``) and streaming (``writeStream``) writes, at least once by
default, exactly once with ``transactional.id.prefix``.

At least once (Spark's own Kafka sink): each task produces its rows with an idempotent producer; a
retried task or a re-run micro-batch writes its rows again.

Exactly once (``transactional.id.prefix``; Spark's Kafka sink has no equivalent): a two-phase commit.
Each task writes its rows of a micro-batch in ONE transaction, with, in that same transaction, the
batch id as an offset of a bookkeeping group (the ledger); it flushes and returns the open transaction's
handle (transactional id, producer id, epoch, transaction version) in its commit message, WITHOUT
committing. The driver's ``commit()``, which Spark calls only when every task of the batch succeeded,
ends each task's transaction with EndTxn(commit); ``abort()`` ends them with EndTxn(abort). So "these
rows are visible" and "this batch is done for this task" become true together, and only for task
attempts Spark counted as successful. (A task must not commit by itself: when an upstream operator of
the task fails -- a Python UDF raising, say -- Spark ends the writer's input as if it were complete, the
writer returns normally, and the attempt fails after it; a commit there would publish a partial task.)

A task:

1. uses the transactional id ``{prefix}-{queryId}-{partitionId}``: the same for every attempt of the
   same task of the query (the query id is kept in the checkpoint), so ``init_transactions()`` fences
   any earlier attempt still alive (a zombie on a lost executor: its sends are refused) and aborts its
   open transaction -- a failed attempt's rows, or a whole batch whose driver died before ``commit()``
   (a transaction the coordinator already prepared to commit is completed instead);
2. then reads the group ``{prefix}``'s committed offset for (topic ``{queryId}``, partition
   ``{partitionId}``) with ``require_stable`` (KIP-447): it is the next batch id this task has to
   write. If the batch is already past it, the task writes nothing (a re-run of a committed batch);
3. else writes its rows and ``send_offsets_to_transaction({queryId/partitionId: batchId + 1})``, flushes,
   and returns the handle (``Producer.transaction_handle()``); the transaction stays open.

The driver's EndTxn is retried after a lost answer or a coordinator move; with transactions V2 the
coordinator recognises the retry of an EndTxn that already completed and answers success for the same
outcome. A commit that fails (the transaction was aborted meanwhile: timed out, or fenced by a later
attempt) fails the batch; Spark then calls ``abort()`` (best effort), and the query stops with the batch
not in its commit log.

Why no batch is written twice: a re-run of batch N (the batch re-run from the offset log after a driver
restart, with the same batch id and the same offsets) gets each task the same transactional id as
before; a task whose transaction the driver committed sees it in the ledger (step 2) and writes
nothing; one whose transaction was left open is aborted by step 1 and written again. Why none is lost:
the driver records the batch in the checkpoint's commit log only after ``commit()`` returned, i.e. after
every task's transaction committed, so a batch with any uncommitted task runs again. The condition: the
re-run must give each partition id the same rows, which holds when the plan is deterministic (the
``tidelog`` source plans a batch from its checkpointed offsets; hash shuffles are deterministic;
``rand()``, ``uuid()`` or wall-clock columns are not).

``kafka.transaction.timeout.ms`` (default 60 s, at most the brokers' ``transaction.max.timeout.ms``,
15 min) must cover the WHOLE micro-batch: a task's transaction is open from its first row until the
driver's ``commit()``, after the last task of the batch finished. A transaction open longer is aborted
by the coordinator; the driver's commit then fails and the batch is run again (nothing is lost or
written twice, but a batch that always takes longer never completes).

Speculative execution must stay off (Spark's default): a speculative copy of a task fences the copy whose
transaction the driver is about to commit, and the commit fails the batch.

In batch writes (no batch id, no ledger) the driver commits every task's transaction once all tasks
succeeded, so a failed job leaves nothing visible to read_committed readers (unless it fails during
the driver's commit, between two tasks' EndTxn); the job running again writes again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from pipelines.tidelog_source.options import OptionError
from pipelines.tidelog_source.security import SecurityOptions, parse_security_options
from shared.client import tables
from shared.client.cluster import ClusterClient
from shared.client.group_coordinator import GroupCoordinatorClient
from shared.client.transactions import ConsumerGroupMetadata, TransactionHandle, TxnCoordinatorClient
from shared.errors import ErrorCode, error_for
from shared.proto import coordinator_pb2 as cpb
from shared.proto import transactions_pb2 as tpb
from shared.types import TopicPartition

log = logging.getLogger(__name__)

#: local properties Spark's MicroBatchExecution sets on every task of a micro-batch
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None = None
    acks: str = "all"
    linger_ms: int = 5
    batch_size: int = 1 << 20
    compression_type: str | None = None
    #: exactly once: the prefix of each task's transactional id, and the bookkeeping group's id
    transactional_id_prefix: str | None = None
    #: kafka.transaction.timeout.ms: how long the coordinator lets a task's transaction stay open
    transaction_timeout_ms: int = 60_000
    #: kafka.security.protocol, kafka.sasl.*, kafka.ssl.* (``security.py``); its repr hides the password
    security: SecurityOptions = SecurityOptions()


def _int(opts: Mapping[str, str], name: str, default: int) -> int:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if not str(raw).strip().isdigit() or int(raw) <= 0:
        raise OptionError(f"option {name} must be a positive integer, got {raw!r}")
    return int(raw)


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    opts = {k.lower(): v for k, v in options.items()}
    servers = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
    if not servers:
        raise OptionError("option bootstrap.servers is required")
    if opts.get("kafka.transactional.id") or opts.get("transactional.id"):
        raise OptionError("option transactional.id is not supported: give transactional.id.prefix (each task "
                          "derives its own transactional id from it)")
    prefix = opts.get("transactional.id.prefix")
    if prefix is not None and not prefix.strip():
        raise OptionError("option transactional.id.prefix is empty")
    timeout_name = "kafka.transaction.timeout.ms" if "kafka.transaction.timeout.ms" in opts else "transaction.timeout.ms"
    return SinkOptions(
        bootstrap_servers=servers,
        topic=opts.get("topic"),
        acks=opts.get("acks", "all"),
        linger_ms=int(opts.get("linger.ms", "5")),
        batch_size=int(opts.get("batch.size", str(1 << 20))),
        compression_type=opts.get("compression.type"),
        transactional_id_prefix=prefix.strip() if prefix else None,
        transaction_timeout_ms=_int(opts, timeout_name, 60_000),
        security=parse_security_options(opts),
    )


@dataclass
class WriteCommit(WriterCommitMessage):
    records: int
    skipped: bool = False  # exactly once: this task's part of the batch was committed by an earlier attempt
    #: exactly once: the task's open transaction, for the driver's commit() / abort() to end
    transaction: TransactionHandle | None = None


def send_rows(producer: Any, topic_opt: str | None, batches: Iterator[pa.RecordBatch]) -> tuple[int, list[Any]]:
    """Produce every row (key, value, optional topic/partition/headers columns; a timestamp column is
    ignored, as by Spark's Kafka sink) through ``Producer.send_batch``, one call per Arrow batch (and
    topic): the row count and the futures (one per record batch) to check once flushed. Bad columns
    are an ``OptionError``."""
    try:
        return tables.send_rows(producer, topic_opt, batches)
    except OptionError:
        raise
    except ValueError as exc:
        raise OptionError(str(exc)) from exc


def _producer(opts: SinkOptions, transactional_id: str | None = None) -> Any:
    from shared.client import Producer

    if transactional_id:
        return Producer(opts.bootstrap_servers, acks="all", linger_ms=opts.linger_ms, batch_size=opts.batch_size,
                        compression_type=opts.compression_type, max_request_size=4 << 20,
                        client_id="tidelog-spark-sink", transactional_id=transactional_id,
                        transaction_timeout_ms=opts.transaction_timeout_ms, **opts.security.client_settings())
    return Producer(opts.bootstrap_servers, acks=opts.acks, linger_ms=opts.linger_ms, batch_size=opts.batch_size,
                    compression_type=opts.compression_type, max_request_size=4 << 20, client_id="tidelog-spark-sink",
                    **opts.security.client_settings())


def write_at_least_once(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> WriteCommit:
    producer = _producer(opts)
    try:
        n, futures = send_rows(producer, opts.topic, batches)
        producer.flush()
        for f in futures:
            f.get()  # surface a failed send as a failed task (Spark retries it)
    finally:
        producer.close()
    return WriteCommit(n)


@dataclass(frozen=True)
class TaskIdentity:
    """Which task of which micro-batch of which query this is (from Spark's TaskContext)."""

    partition: int
    batch_id: int | None = None  # None in batch (non-streaming) writes
    query_id: str | None = None

    def transactional_id(self, prefix: str) -> str:
        return f"{prefix}-{self.query_id}-{self.partition}" if self.query_id else f"{prefix}-{self.partition}"

    def ledger_key(self) -> TopicPartition:
        """The bookkeeping group's (topic, partition) whose committed offset is this task's next batch id."""
        return TopicPartition(self.query_id or "batch", self.partition)


def current_task() -> TaskIdentity:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise OptionError("the exactly-once sink runs inside Spark tasks only")
    batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
    return TaskIdentity(ctx.partitionId(), int(batch) if batch is not None else None,
                        ctx.getLocalProperty(QUERY_ID_PROPERTY))


class BatchLedger:
    """The bookkeeping group ``{prefix}``: per (query, Spark partition), the next batch id to write,
    committed with the rows' transaction (``send_offsets_to_transaction``), read with require_stable."""

    def __init__(self, bootstrap_servers: str, group_id: str, timeout_s: float = 60.0,
                 security: SecurityOptions | None = None) -> None:
        self.group_id = group_id
        self.timeout_s = timeout_s
        self.cluster = ClusterClient(bootstrap_servers, "tidelog-spark-sink-ledger",
                                     security=security.client_security() if security else None)
        self.coordinator = GroupCoordinatorClient(self.cluster, group_id)

    def next_batch(self, key: TopicPartition) -> int | None:
        """The committed next batch id of ``key`` (None: none committed). A transaction's offset commit
        still pending answers UNSTABLE_OFFSET_COMMIT (retriable): asked again until it is settled."""
        req = cpb.OffsetFetchRequest(group_id=self.group_id, require_stable=True, partitions=[
            cpb.TopicPartitions(topic=key.topic, partitions=[key.partition])])
        deadline = time.monotonic() + self.timeout_s
        while True:
            resp = self.coordinator.call("OffsetFetch", req)
            code = resp.error_code or max((p.error_code for t in resp.topics for p in t.partitions), default=0)
            if code == ErrorCode.GROUP_ID_NOT_FOUND:
                return None
            if code:
                err = error_for(code, resp.error_message)
                if not err.retriable or time.monotonic() > deadline:
                    raise err
                time.sleep(0.1)
                continue
            for t in resp.topics:
                for p in t.partitions:
                    if t.name == key.topic and p.partition == key.partition and p.committed_offset >= 0:
                        return int(p.committed_offset)
            return None

    def close(self) -> None:
        self.coordinator.close()
        self.cluster.close()


def write_exactly_once(opts: SinkOptions, task: TaskIdentity, batches: Iterator[pa.RecordBatch]) -> WriteCommit:
    """Executor side: this task's rows of the batch in one transaction, with the batch id in the ledger in
    the same transaction; flushed and left open, its handle returned for the driver's ``commit()`` (see
    the module docstring for why a re-run writes nothing twice)."""
    assert opts.transactional_id_prefix
    producer = _producer(opts, task.transactional_id(opts.transactional_id_prefix))
    ledger = (BatchLedger(opts.bootstrap_servers, opts.transactional_id_prefix, security=opts.security)
              if task.batch_id is not None else None)
    try:
        producer.init_transactions()  # fences earlier attempts; their open transaction is aborted
        if ledger is not None and task.batch_id is not None:
            done = ledger.next_batch(task.ledger_key())
            if done is not None and done > task.batch_id:
                log.info("batch %d of partition %d was committed before: writing nothing", task.batch_id,
                         task.partition)
                for _ in batches:  # read the input all the same (the worker expects it consumed)
                    pass
                return WriteCommit(0, skipped=True)
        producer.begin_transaction()
        try:
            n, futures = send_rows(producer, opts.topic, batches)
            if ledger is not None and task.batch_id is not None:
                producer.send_offsets_to_transaction({task.ledger_key(): task.batch_id + 1},
                                                     ConsumerGroupMetadata(opts.transactional_id_prefix))
            handle = producer.transaction_handle()  # flushes first; a failed send raises
            for f in futures:
                f.get()
        except BaseException:
            try:
                producer.abort_transaction()
            except Exception as exc:  # fenced or broken: the next attempt's init_transactions aborts it
                log.info("abort after a failed write: %s", exc)
            raise
    finally:
        producer.close()  # the transaction stays open, for the driver
        if ledger is not None:
            ledger.close()
    return WriteCommit(n, transaction=handle)


def end_transaction(cluster: ClusterClient, handle: TransactionHandle, commit: bool, timeout_s: float = 60.0) -> None:
    """EndTxn(commit or abort) for a task's transaction, retried (a lost answer, a coordinator move) until
    ``timeout_s``. A retry of an EndTxn that completed is answered success by the coordinator (V2: the
    epoch it bumped tells it a retry); any other error is raised."""
    client = TxnCoordinatorClient(cluster, handle.transactional_id)
    try:
        resp = client.call("EndTxn", tpb.EndTxnRequest(
            transactional_id=handle.transactional_id, producer_id=handle.producer_id,
            producer_epoch=handle.producer_epoch, committed=commit,
            client_transaction_version=handle.transaction_version), time.monotonic() + timeout_s)
    finally:
        client.close()
    if resp.error_code:
        raise error_for(resp.error_code, f"{'commit' if commit else 'abort'} of the transaction of "
                                         f"{handle.transactional_id!r} (producer {handle.producer_id}, epoch "
                                         f"{handle.producer_epoch}): {resp.error_message}")


def end_transactions(opts: SinkOptions, messages: list[WriterCommitMessage | None], commit: bool) -> int:
    """Driver side: end every task's transaction of ``messages``; the number ended. A commit raises on the
    first failure (the batch fails and is run again; tasks already committed skip it then); an abort is
    best effort (what it misses, the next attempt's ``init_transactions()`` or the timeout aborts)."""
    handles = [m.transaction for m in messages if isinstance(m, WriteCommit) and m.transaction is not None]
    if not handles:
        return 0
    ended = 0
    cluster = ClusterClient(opts.bootstrap_servers, "tidelog-spark-sink-driver",
                            security=opts.security.client_security())
    try:
        for h in handles:
            try:
                end_transaction(cluster, h, commit)
                ended += 1
            except Exception as exc:
                if commit:
                    raise
                log.info("abort of %s: %s", h.transactional_id, exc)
    finally:
        cluster.close()
    return ended


def write_batches(options: Mapping[str, str], batches: Iterator[pa.RecordBatch]) -> WriteCommit:
    """Executor side: the task's rows, at least once, or exactly once with ``transactional.id.prefix``."""
    opts = parse_sink_options(options)
    if opts.transactional_id_prefix:
        return write_exactly_once(opts, current_task(), batches)
    return write_at_least_once(opts, batches)


class TidelogWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        parse_sink_options(options).security.check_files()  # bad options fail on the driver, before any task
        self.options = options
        self.schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteCommit:
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        end_transactions(parse_sink_options(self.options), messages, commit=True)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        end_transactions(parse_sink_options(self.options), messages, commit=False)


class TidelogStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        parse_sink_options(options).security.check_files()
        self.options = options
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> WriteCommit:
        def batches() -> Iterator[pa.RecordBatch]:
            rows = []
            for row in iterator:
                rows.append(row.asDict(recursive=True))
                if len(rows) >= 1_000:  # sent as it comes: a task's rows are not all held in memory
                    yield pa.RecordBatch.from_pylist(rows)
                    rows = []
            if rows:
                yield pa.RecordBatch.from_pylist(rows)

        return write_batches(self.options, batches())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task succeeded: commit their transactions (exactly once; at least once sent everything)."""
        n = end_transactions(parse_sink_options(self.options), messages, commit=True)
        if n:
            log.info("batch %d: committed %d task transactions", batchId, n)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """A task failed: abort the transactions of those that succeeded (a failed one's is aborted by its
        retry's init_transactions, or times out)."""
        end_transactions(parse_sink_options(self.options), messages, commit=False)
