"""A transactional client as a process, for the transaction checker and fault tests
(``test_transactions_checker``, ``test_transactions_faults``). It reports on stdout, one JSON object per line
(flushed each time), so that what it saw survives a SIGKILL of itself.

Modes:

- ``produce BOOTSTRAP TXN_ID --worker W --topics A,B --partitions N --txns T``: T transactions, each writing
  ``--records`` records to random partitions of every topic. Before beginning a transaction it prints
  ``{"event": "decided", "txn": i, "commit": bool, "records": [[topic, partition, value], ...]}`` (about a third
  are aborted, decided with ``random.Random(--seed)``), then ``{"event": "outcome", "txn": i, "outcome": o}``
  with ``o`` one of ``committed`` (commit_transaction returned), ``aborted`` (abort_transaction returned) or
  ``unknown`` (a call failed: the producer is closed, and a new one's ``init_transactions`` ends the
  transaction either way). Values are ``w{W}-t{i:05d}-r{j:02d}``; ``--first-txn`` numbers a restarted
  worker's transactions after those of the instance it replaces.
- ``ctp BOOTSTRAP TXN_ID --input IN --output OUT --group G --partitions N --total M``: a consume-transform-
  produce job: reads IN (assigned partitions, positions from G's committed offsets, fetched after
  ``init_transactions`` so the previous instance's transaction is over), writes each value upper-cased to
  the same partition of OUT, and commits the input offsets in the same transaction, ``--batch`` records at a
  time. Prints ``{"event": "committed", "position": total committed position}`` after each commit, and exits
  0 when the committed positions add up to M.
- ``stall BOOTSTRAP TXN_ID --topics T --transaction-timeout-ms MS``: begins a transaction, sends one record
  (``stall-before``) and flushes, prints ``{"event": "sent"}``, then waits for a line on stdin (the test
  SIGSTOPs and SIGCONTs it meanwhile); then sends ``stall-after`` and commits, printing
  ``{"event": "result", "kind": "committed" | <TransactionError.kind>, "code": int, "error": str}``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

from shared.client import Consumer, Producer, TopicPartition, TransactionError


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def new_producer(args: argparse.Namespace) -> Producer:
    while True:
        p = Producer(args.bootstrap, transactional_id=args.txn_id, transaction_timeout_ms=args.transaction_timeout_ms,
                     max_block_ms=args.max_block_ms, request_timeout_ms=5000, delivery_timeout_ms=30_000,
                     linger_ms=2)
        try:
            p.init_transactions()
            return p
        except Exception as exc:  # coordinator unavailable for longer than max_block_ms: try again
            emit(event="init-error", error=repr(exc))
            p.close(5)
            time.sleep(0.2)


def produce(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    topics = args.topics.split(",")
    p = new_producer(args)
    for i in range(args.first_txn, args.first_txn + args.txns):
        commit = rng.random() >= args.abort_ratio
        parts = [(t, rng.randrange(args.partitions)) for t in topics for _ in range(args.records)]
        records = [[t, part, f"w{args.worker}-t{i:05d}-r{j:02d}"] for j, (t, part) in enumerate(parts)]
        emit(event="decided", txn=i, commit=commit, records=records)
        try:
            p.begin_transaction()
            for t, part, value in records:
                p.send(t, value.encode(), partition=part)
            p.flush()  # so that an aborted transaction's records are in the log (an abort drops unsent ones)
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
        except Exception as exc:
            emit(event="outcome", txn=i, outcome="unknown", error=repr(exc))
            p.close(5)
            p = new_producer(args)
        else:
            emit(event="outcome", txn=i, outcome="committed" if commit else "aborted")
        if args.pause_ms:
            time.sleep(args.pause_ms / 1000)
    p.close(10)
    emit(event="done")
    return 0


def ctp(args: argparse.Namespace) -> int:
    p = new_producer(args)
    tps = [TopicPartition(args.input, i) for i in range(args.partitions)]
    c = Consumer(args.bootstrap, group_id=args.group, enable_auto_commit=False, auto_offset_reset="earliest",
                 isolation_level="read_committed")
    c.assign(tps)
    committed = c.committed(tps)
    for tp in tps:
        c.seek(tp, committed.get(tp) or 0)
    position = {tp: committed.get(tp) or 0 for tp in tps}
    emit(event="started", position=sum(position.values()))
    while sum(position.values()) < args.total:
        recs = list(c.poll(200, max_records=args.batch))
        if not recs:
            continue
        try:
            p.begin_transaction()
            ends: dict[TopicPartition, int] = {}
            for r in recs:
                p.send(args.output, r.value.upper(), partition=r.partition)
                ends[TopicPartition(r.topic, r.partition)] = r.offset + 1
            p.send_offsets_to_transaction(ends, c.group_metadata())
            p.commit_transaction()
        except TransactionError as exc:  # start again from the committed offsets with a new producer
            emit(event="error", kind=exc.kind.value, error=repr(exc))
            p.close(5)
            p = new_producer(args)
            committed = c.committed(tps)
            for tp in tps:
                c.seek(tp, committed.get(tp) or 0)
                position[tp] = committed.get(tp) or 0
            continue
        position.update(ends)
        emit(event="committed", position=sum(position.values()))
        if args.pause_ms:
            time.sleep(args.pause_ms / 1000)
    c.close()
    p.close(10)
    emit(event="done")
    return 0


def stall(args: argparse.Namespace) -> int:
    p = new_producer(args)
    p.begin_transaction()
    p.send(args.topics, b"stall-before", partition=0).get(30)
    emit(event="sent", producer_id=p.producer_id, producer_epoch=p.producer_epoch)
    sys.stdin.readline()
    try:
        p.send(args.topics, b"stall-after", partition=0)
        p.commit_transaction()
    except TransactionError as exc:
        emit(event="result", kind=exc.kind.value, code=int(exc.code), error=repr(exc), state=p.transaction_state)
    else:
        emit(event="result", kind="committed", code=0, error="", state=p.transaction_state)
    p.close(5)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("produce", "ctp", "stall"))
    ap.add_argument("bootstrap")
    ap.add_argument("txn_id")
    ap.add_argument("--worker", type=int, default=0)
    ap.add_argument("--topics", default="")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--txns", type=int, default=10)
    ap.add_argument("--first-txn", type=int, default=0, help="number of the first transaction (a restarted worker)")
    ap.add_argument("--records", type=int, default=3, help="records per topic per transaction")
    ap.add_argument("--abort-ratio", type=float, default=1 / 3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pause-ms", type=int, default=0)
    ap.add_argument("--input", default="")
    ap.add_argument("--output", default="")
    ap.add_argument("--group", default="")
    ap.add_argument("--total", type=int, default=0)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--transaction-timeout-ms", type=int, default=60_000)
    ap.add_argument("--max-block-ms", type=int, default=20_000)
    args = ap.parse_args(argv)
    return {"produce": produce, "ctp": ctp, "stall": stall}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
