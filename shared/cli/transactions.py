"""``tidelog transactions list|describe|describe-producers|find-hanging|abort`` (through the REST admin
API, ``/v1/transactions``), as ``kafka-transactions.sh``: the same options and output columns."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from shared.cli.connect import cluster_options
from shared.cli.groups import _rest, _table


def _json(out: Any) -> None:
    click.echo(json.dumps(out, indent=2))


@click.group()
def transactions() -> None:
    """List and describe transactions; find and abort hanging ones."""


@transactions.command("list")
@click.option("--state", "states", multiple=True, help="only this state (Ongoing, PrepareCommit, ...); repeatable")
@click.option("--producer-id", "producer_ids", type=int, multiple=True, help="only this producer id; repeatable")
@click.option("--duration-ms", type=int, default=-1, show_default=True, help="only transactions running longer (ms)")
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def list_transactions(states: tuple[str, ...], producer_ids: tuple[int, ...], duration_ms: int, as_json: bool,
                      bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Every transactional id the coordinators know."""
    out = _rest(bootstrap, rest, data_dir, "GET", "/v1/transactions",
                params={"state": list(states), "producer_id": list(producer_ids), "duration_ms": duration_ms})["transactions"]
    if as_json:
        _json(out)
        return
    _table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
           [[t["transactional_id"], t["coordinator"], t["producer_id"], t["state"]] for t in out])


@transactions.command("describe")
@click.option("--transactional-id", required=True, help="transactional id")
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def describe(transactional_id: str, as_json: bool, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """The state of a transactional id at its coordinator."""
    t = _rest(bootstrap, rest, data_dir, "GET", f"/v1/transactions/{transactional_id}")
    if as_json:
        _json(t)
        return
    start = t.get("transaction_start_time_ms")
    duration = int(time.time() * 1000) - start if start is not None else None
    _table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
            "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
           [[t["coordinator"], t["transactional_id"], t["producer_id"], t["producer_epoch"], t["state"],
             t["transaction_timeout_ms"], start, duration, ",".join(t["topic_partitions"])]])


@transactions.command("describe-producers")
@click.option("--topic", required=True, help="topic name")
@click.option("--partition", type=int, required=True, help="partition number")
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def describe_producers(topic: str, partition: int, as_json: bool, bootstrap: str | None, rest: str | None,
                       data_dir: str) -> None:
    """The active producers of a partition, at its leader."""
    out = _rest(bootstrap, rest, data_dir, "GET", "/v1/transactions/producers",
                params={"topic": topic, "partition": partition})
    if as_json:
        _json(out)
        return
    _table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
            "CurrentTransactionStartOffset"],
           [[p["producer_id"], p["producer_epoch"], p["coordinator_epoch"], p["last_sequence"], p["last_timestamp"],
             p["current_txn_start_offset"] if p["current_txn_start_offset"] >= 0 else "None"]
            for p in out["active_producers"]])


@transactions.command("find-hanging")
@click.option("--broker-id", type=int, help="search the partitions with a replica on this broker")
@click.option("--topic", help="topic name to limit the search to")
@click.option("--partition", type=int, help="partition number (with --topic)")
@click.option("--max-transaction-timeout", type=click.IntRange(min=0), default=15, show_default=True,
              help="maximum transaction timeout in minutes (transaction.max.timeout.ms) to limit the search")
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def find_hanging(broker_id: int | None, topic: str | None, partition: int | None, max_transaction_timeout: int,
                 as_json: bool, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Open transactions no coordinator will end (they hold read_committed consumers back)."""
    if topic is None and broker_id is None:
        raise click.UsageError("find-hanging needs --topic or --broker-id to limit the scope of the search")
    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")
    params: dict[str, Any] = {"max_transaction_timeout_ms": max_transaction_timeout * 60_000}
    for name, value in (("topic", topic), ("partition", partition), ("broker", broker_id)):
        if value is not None:
            params[name] = value
    out = _rest(bootstrap, rest, data_dir, "GET", "/v1/transactions/hanging", params=params)["hanging"]
    if as_json:
        _json(out)
        return
    _table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp",
            "Duration(min)"],
           [[h["topic"], h["partition"], h["producer_id"], h["producer_epoch"], h["coordinator_epoch"], h["start_offset"],
             h["last_timestamp"], h["duration_ms"] // 60_000 if h["duration_ms"] is not None else None] for h in out])


@transactions.command("abort")
@click.option("--topic", required=True, help="topic name")
@click.option("--partition", type=int, required=True, help="partition number")
@click.option("--start-offset", type=int, help="start offset of the transaction to abort")
@click.option("--producer-id", type=int, help="producer id (instead of --start-offset)")
@click.option("--producer-epoch", type=int, help="producer epoch (with --producer-id)")
@click.option("--coordinator-epoch", type=int, help="coordinator epoch (with --producer-id)")
@cluster_options
def abort(topic: str, partition: int, start_offset: int | None, producer_id: int | None, producer_epoch: int | None,
          coordinator_epoch: int | None, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Abort a hanging transaction: an ABORT marker at the partition's leader."""
    if start_offset is None and producer_id is None:
        raise click.UsageError("name the transaction with --start-offset, or with --producer-id, --producer-epoch "
                               "and --coordinator-epoch")
    if start_offset is None and (producer_epoch is None or coordinator_epoch is None):
        raise click.UsageError("--producer-id needs --producer-epoch and --coordinator-epoch")
    body: dict[str, Any] = {"topic": topic, "partition": partition}
    if start_offset is not None:
        body["start_offset"] = start_offset
    else:
        body.update(producer_id=producer_id, producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch)
    r = _rest(bootstrap, rest, data_dir, "POST", "/v1/transactions/abort", json=body)
    click.echo(f"Aborted the transaction of producer {r['producer_id']} (epoch {r['producer_epoch']}) on "
               f"{r['topic']}-{r['partition']} with coordinator epoch {r['coordinator_epoch']}")
