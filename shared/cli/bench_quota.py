"""``tidelog bench quota``: a client running flat out under its quota, the rate the brokers saw each second.

The producer (or consumer) uses ``--client-id``; every second the command
prints the bytes/s the brokers counted for that client id (read from the
active quota service, which every broker reports to) next to the quota that
applies (``GET /v1/quotas/effective``) and the throttling the client saw.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import click
import grpc

from shared.cli.connect import cluster_options, resolve
from shared.cli.launcher import read_cluster_file
from shared.client import Admin, Consumer, Producer, TopicPartition
from shared.errors import ErrorCode, TidelogError
from shared.proto import quota_pb2 as qpb
from shared.proto import quota_pb2_grpc as qpb_grpc
from shared.security.transport import sync_channel

TYPES = {"produce": (0, "producer_byte_rate"), "consume": (1, "consumer_byte_rate")}


def broker_usage(addresses: list[str], client_id: str, qtype: int) -> float | None:
    """What the brokers reported for the client id so far (summed), from the active quota instance."""
    for address in addresses:
        try:
            with sync_channel(address) as ch:
                resp = qpb_grpc.QuotaServiceStub(ch).DescribeUsage(qpb.DescribeUsageRequest(client_id=client_id),
                                                                  timeout=2)
        except grpc.RpcError:
            continue
        if resp.active:
            return sum(t.total for t in resp.totals if t.quota_type == qtype)
    return None


def _quota_addresses(data_dir: str, given: tuple[str, ...]) -> list[str]:
    if given:
        return list(given)
    info = read_cluster_file(data_dir) or {}
    return [p["address"] for p in info.get("processes", []) if p.get("role") == "quota"]


class _Client(threading.Thread):
    def __init__(self, kind: str, servers: str, client_id: str, topic: str, record_size: int) -> None:
        super().__init__(daemon=True)
        self.kind, self.topic, self.done = kind, topic, threading.Event()
        self.errors: list[BaseException] = []
        if kind == "produce":
            self.producer = Producer(servers, client_id=client_id, batch_size=65_536, linger_ms=5,
                                     buffer_memory=4 << 20)
            self.value = b"q" * record_size
        else:
            self.consumer = Consumer(servers, client_id=client_id, auto_offset_reset="earliest",
                                     max_partition_fetch_bytes=256 * 1024)
            parts = self.consumer.cluster.partitions_for(topic, 10)
            self.consumer.assign([TopicPartition(topic, p) for p in sorted(parts)])

    @property
    def throttled(self) -> int:
        return (self.producer if self.kind == "produce" else self.consumer).throttled_responses

    def run(self) -> None:
        while not self.done.is_set():
            if self.kind == "produce":
                self.producer.send(self.topic, self.value).add_errback(self.errors.append)
            else:
                self.consumer.poll(100)

    def close(self) -> None:
        self.done.set()
        self.join(10)
        if self.kind == "produce":
            self.producer.close(30)
        else:
            self.consumer.close()


@click.command("quota")
@click.option("--client-id", required=True, help="the client id whose quota to watch")
@click.option("--topic", required=True, help="produce: created if missing; consume: read from the beginning")
@click.option("--type", "kind", type=click.Choice(list(TYPES)), default="produce", show_default=True)
@click.option("--seconds", type=click.IntRange(1), default=20, show_default=True)
@click.option("--record-size", type=click.IntRange(1), default=1024, show_default=True)
@click.option("--quota-service", "quota_services", multiple=True,
              help="quota service host:port (default: the quota instances in --data-dir's cluster.json)")
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def bench_quota(client_id: str, topic: str, kind: str, seconds: int, record_size: int, quota_services: tuple[str, ...],
                as_json: bool, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Run a client flat out for SECONDS and print, each second, the rate the brokers saw against its quota."""
    servers, rest_url = resolve(bootstrap, rest, data_dir)
    if not servers:
        raise click.ClickException("no brokers known: pass --bootstrap-server")
    qtype, key = TYPES[kind]
    addresses = _quota_addresses(data_dir, quota_services)
    with Admin(servers, rest_url=rest_url) as admin:
        if kind == "produce":
            try:
                admin.create_topic(topic, 1, 1)
            except TidelogError as exc:
                if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise click.ClickException(str(exc)) from None
        match = admin.effective_client_quotas("ANONYMOUS", client_id)["quotas"][key]
    quota = match["value"] if match else None
    client = _Client(kind, servers, client_id, topic, record_size)
    rows: list[dict[str, Any]] = []
    last = broker_usage(addresses, client_id, qtype) or 0.0
    t_last = time.monotonic()
    client.start()
    try:
        for second in range(1, seconds + 1):
            time.sleep(max(0.0, t_last + 1.0 - time.monotonic()))
            now, total = time.monotonic(), broker_usage(addresses, client_id, qtype)
            rate = None if total is None else (total - last) / (now - t_last)
            rows.append({"second": second, "bytes_per_s": rate, "quota": quota, "throttled_responses": client.throttled})
            if not as_json:
                shown = "quota service unreachable" if rate is None else f"{rate / 1e6:8.3f} MB/s"
                ratio = f" ({rate / quota:6.1%} of quota)" if rate is not None and quota else ""
                limit = f"quota {quota / 1e6:.3f} MB/s" if quota else "no quota"
                click.echo(f"{second:3d}s  {shown}{ratio}  {limit}  "
                           f"throttled responses {client.throttled}")
            last, t_last = (total if total is not None else last), now
    finally:
        client.close()
    measured = [r["bytes_per_s"] for r in rows if r["bytes_per_s"] is not None]
    summary = {"client_id": client_id, "type": kind, "quota": quota, "quota_entry": match,
               "avg_bytes_per_s": sum(measured) / len(measured) if measured else None, "seconds": rows}
    if as_json:
        click.echo(json.dumps(summary))
    elif measured:
        avg = summary["avg_bytes_per_s"]
        click.echo(f"average {avg / 1e6:.3f} MB/s" + (f" = {avg / quota:.1%} of the quota" if quota else " (no quota)"))
    if client.errors:
        raise click.ClickException(f"{len(client.errors)} sends failed, first: {client.errors[0]}")
