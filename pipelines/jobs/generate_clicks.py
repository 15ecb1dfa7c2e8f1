"""Produce click-like JSON events to a topic: ``{"user", "url", "ts"}`` keyed by user.

    python -m pipelines.jobs.generate_clicks --topic clicks --events 20000
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import click

from pipelines.spark import connection_from
from shared.client import Admin, Producer
from shared.errors import ErrorCode, TidelogError


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--topic", default="clicks", show_default=True)
@click.option("--events", default=20_000, show_default=True, type=click.IntRange(1))
@click.option("--users", default=50, show_default=True, type=click.IntRange(1))
@click.option("--minutes", default=5, show_default=True, type=click.IntRange(1), help="spread event times over the last N minutes")
@click.option("--partitions", default=3, show_default=True, type=click.IntRange(1))
@click.option("--seed", default=1, show_default=True)
@click.option("--data-dir", default=None, help="local cluster directory (default .tidelog)")
@click.option("--bootstrap-server", "bootstrap", default=None)
def main(topic: str, events: int, users: int, minutes: int, partitions: int, seed: int, data_dir: str | None,
         bootstrap: str | None) -> None:
    conn = connection_from(data_dir, bootstrap)
    with Admin(conn.servers, **conn.settings) as admin:
        try:
            admin.create_topic(topic, partitions=partitions)
        except TidelogError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
    generate(conn.servers, topic, events, users, minutes, seed, settings=conn.settings)
    click.echo(f"{events} click events sent to {topic}")


def generate(servers: str, topic: str, events: int, users: int = 50, minutes: int = 5, seed: int = 1,
             settings: dict[str, Any] | None = None) -> list[dict]:
    """``settings``: the producer's security settings (kafka-python's names; ``Connection.settings``)."""
    rng = random.Random(seed)
    now = int(time.time() * 1000)
    sent = []
    with Producer(servers, **(settings or {})) as producer:
        for _ in range(events):
            ev = {"user": f"u{rng.randrange(users)}", "url": f"/p/{rng.randrange(20)}",
                  "ts": now - rng.randrange(minutes * 60_000)}
            producer.send(topic, json.dumps(ev).encode(), key=ev["user"].encode(), timestamp=ev["ts"])
            sent.append(ev)
    return sent


if __name__ == "__main__":
    main()
