"""``tidelog produce`` (lines from stdin) and ``tidelog consume`` (records to stdout)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
import typing
from collections.abc import Iterator

import click

from shared.cli.connect import bootstrap_servers, client_settings, cluster_options
from shared.cli.wording import plural
from shared.client import Consumer, Producer, TopicPartition
from shared.errors import ErrorCode, TidelogError


@click.command()
@click.argument("topic")
@click.option("--key-separator", default=None, help="split each line into key and value at the first SEP")
@click.option("--acks", type=click.Choice(["all", "-1", "1", "0"]), default="all", show_default=True)
@click.option("--partition", type=click.IntRange(0), default=None, help="send every record to this partition")
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]), default="none", show_default=True)
@click.option("--linger-ms", type=click.IntRange(0), default=5, show_default=True)
@click.option("--max-block-ms", type=click.IntRange(0), default=5000, show_default=True,
              help="how long to wait for the topic's metadata (and buffer space), as Kafka's max.block.ms "
                   "(the client's default is 60000)")
@click.option("--delivery-timeout-ms", type=click.IntRange(1000), default=120_000, show_default=True,
              help="how long a record may take to be acknowledged, retries included (Kafka's delivery.timeout.ms)")
@cluster_options
def produce(topic: str, key_separator: str | None, acks: str, partition: int | None, compression: str, linger_ms: int,
            max_block_ms: int, delivery_timeout_ms: int, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Send each line of standard input as a record to TOPIC."""
    servers = bootstrap_servers(bootstrap, rest, data_dir)
    request_timeout_ms = min(30_000, delivery_timeout_ms - linger_ms)  # Kafka: delivery >= linger + request
    if request_timeout_ms < 1:
        raise click.BadParameter("must be larger than --linger-ms", param_hint="--delivery-timeout-ms")
    producer = Producer(servers, acks=acks, compression_type=compression, linger_ms=linger_ms,
                        max_block_ms=max_block_ms, delivery_timeout_ms=delivery_timeout_ms,
                        request_timeout_ms=request_timeout_ms, **client_settings())
    futures = []
    try:
        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            key = None
            if key_separator is not None:
                sep = key_separator.encode()
                if sep not in line:
                    raise click.ClickException(f"line {len(futures) + 1} has no key separator {key_separator!r}")
                key, line = line.split(sep, 1)
            futures.append(producer.send(topic, line, key=key, partition=partition))
        producer.flush()
        for f in futures:
            f.get()
    except TidelogError as exc:
        if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and not futures:
            raise click.ClickException(
                f"topic {topic!r} not present in metadata after {max_block_ms} ms (--max-block-ms): "
                f"create it with `tidelog topics create {topic}`") from None
        raise click.ClickException(str(exc)) from None
    finally:
        producer.close()
    click.echo(f"{plural(len(futures), 'record')} sent to {topic}", err=True)


@click.command()
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="start at the earliest offset (default: the end)")
@click.option("--partition", type=click.IntRange(0), default=None, help="read only this partition")
@click.option("--offset", type=click.IntRange(0), default=None, help="start offset (needs --partition)")
@click.option("--max-messages", type=click.IntRange(1), default=None, help="exit after this many records")
@click.option("--timeout-ms", type=click.IntRange(1), default=None, help="exit when no record arrives for this long")
@click.option("--print-key", is_flag=True, help="print key<TAB>value")
@click.option("--print-offset", is_flag=True, help="print partition:offset before each record")
@click.option("--group", default=None, help="consume as a member of this consumer group (commits after printing)")
@click.option("--group-instance-id", default=None, help="group.instance.id: a static member (needs --group)")
@cluster_options
def consume(topic: str, from_beginning: bool, partition: int | None, offset: int | None, max_messages: int | None,
            timeout_ms: int | None, print_key: bool, print_offset: bool, group: str | None, group_instance_id: str | None,
            bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Print the records of TOPIC, one value per line."""
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition")
    if group is not None and (partition is not None or offset is not None):
        raise click.UsageError("--group cannot be combined with --partition/--offset")
    if group_instance_id is not None and group is None:
        raise click.UsageError("--group-instance-id needs --group")
    servers = bootstrap_servers(bootstrap, rest, data_dir)
    reset = "earliest" if from_beginning else "latest"
    if group is not None:
        consume_group(servers, topic, group, group_instance_id, reset, max_messages, timeout_ms, print_key, print_offset)
        return
    consumer = Consumer(servers, auto_offset_reset=reset, **client_settings())
    out = sys.stdout.buffer
    count = 0
    try:
        parts = consumer.cluster.partitions_for(topic, 10)
        if partition is not None and partition not in parts:
            raise click.ClickException(f"{topic} has no partition {partition}")
        tps = [TopicPartition(topic, p) for p in ([partition] if partition is not None else sorted(parts))]
        consumer.assign(tps)
        if offset is not None:
            consumer.seek(tps[0], offset)
        elif from_beginning:
            consumer.seek_to_beginning(*tps)
        else:
            consumer.seek_to_end(*tps)
        count = _print_records(consumer, max_messages, timeout_ms, print_key, print_offset, out)
    except TidelogError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    click.echo(f"Processed a total of {plural(count, 'message')}", err=True)


def _print_records(consumer: Consumer, max_messages: int | None, timeout_ms: int | None, print_key: bool,
                   print_offset: bool, out: typing.BinaryIO, *, commit: bool = False) -> int:
    """Print what ``consumer`` polls until ``max_messages`` or ``timeout_ms`` of silence; with ``commit``, commit
    after printing each batch (at least once). Returns how many records were printed."""
    count = 0
    idle_since = time.monotonic()
    try:
        while max_messages is None or count < max_messages:
            batch = consumer.poll(200, max_records=(max_messages - count) if max_messages else None)
            if not batch:
                if timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= timeout_ms:
                    break
                continue
            idle_since = time.monotonic()
            for r in batch:
                prefix = f"{r.partition}:{r.offset}\t".encode() if print_offset else b""
                key = (r.key or b"") + b"\t" if print_key else b""
                out.write(prefix + key + (r.value or b"") + b"\n")
                count += 1
            out.flush()
            if commit:
                consumer.commit({tp: recs[-1].offset + 1 for tp in batch.partitions() if (recs := batch.records(tp))})
    except KeyboardInterrupt:  # Ctrl-C (or SIGTERM, see sigterm_as_interrupt): stop and say how many were printed
        out.flush()
    return count


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within: SIGTERM (``kill PID``) stops like Ctrl-C, so the member leaves its group at once (as Kafka's
    console consumer closes in its shutdown hook) instead of holding its partitions until the session timeout."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _PrintAssignment:
    """Says on stderr which partitions this member got or gave up."""

    @staticmethod
    def _say(what: str, tps: set[TopicPartition]) -> None:
        click.echo(f"{what}: {', '.join(str(tp) for tp in sorted(tps))}", err=True)

    def on_partitions_assigned(self, tps: set[TopicPartition]) -> None:
        self._say("assigned", tps)

    def on_partitions_revoked(self, tps: set[TopicPartition]) -> None:
        self._say("revoked", tps)

    def on_partitions_lost(self, tps: set[TopicPartition]) -> None:
        self._say("lost", tps)


def consume_group(servers: str, topic: str, group: str, instance_id: str | None, reset: str, max_messages: int | None,
                  timeout_ms: int | None, print_key: bool, print_offset: bool) -> None:
    """``consume --group``: subscribe, print, commit after printing each batch (at least once)."""
    consumer = Consumer(servers, group_id=group, group_instance_id=instance_id, auto_offset_reset=reset,
                        enable_auto_commit=False, **client_settings())
    out = sys.stdout.buffer
    with sigterm_as_interrupt():
        count = _consume_group_loop(consumer, topic, max_messages, timeout_ms, print_key, print_offset, out)
    click.echo(f"Processed a total of {plural(count, 'message')}", err=True)


def _consume_group_loop(consumer: Consumer, topic: str, max_messages: int | None, timeout_ms: int | None,
                        print_key: bool, print_offset: bool, out: typing.BinaryIO) -> int:
    count = 0
    try:
        consumer.subscribe([topic], listener=_PrintAssignment())
        count = _print_records(consumer, max_messages, timeout_ms, print_key, print_offset, out, commit=True)
    except TidelogError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    return count
