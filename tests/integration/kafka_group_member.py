"""One confluent-kafka (librdkafka) consumer-group member as a process, for the Kafka-listener group tests
(``test_kafka_groups``): it subscribes, and reports on stdout, one JSON object per line (flushed each time):

- ``{"event": "assigned", "partitions": [...]}``: its whole assignment, after every change;
- ``{"event": "record", "partition": p, "offset": o, "value": "..."}``: a record it consumed (printed
  before any commit of it);
- ``{"event": "committed", "partition": p, "offset": o}``: a synchronous commit the coordinator
  acknowledged (``o`` is the next offset to consume);
- ``{"event": "error", "code": "...", "message": "..."}``: an error the client surfaced.

It commits each record after printing it, for its first ``--commit-limit`` records (all of them when the
limit is negative), and never after: what it consumed beyond the limit is consumed but uncommitted, which
is what a member killed mid-batch leaves behind. SIGTERM closes the consumer (leaving the group) and exits.

Usage: python -m tests.integration.kafka_group_member BOOTSTRAP TOPIC GROUP [--protocol classic|consumer]
       [--commit-limit N] [--session-timeout-ms MS] [--client-id ID]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("group")
    ap.add_argument("--protocol", choices=("classic", "consumer"), default="classic")
    ap.add_argument("--commit-limit", type=int, default=-1)
    ap.add_argument("--session-timeout-ms", type=int, default=3000)
    ap.add_argument("--client-id", default="kafka-group-member")
    args = ap.parse_args(argv)

    conf: dict[str, Any] = {"bootstrap.servers": args.bootstrap, "group.id": args.group,
                            "client.id": args.client_id, "enable.auto.commit": False,
                            "auto.offset.reset": "earliest", "group.protocol": args.protocol}
    if args.protocol == "classic":  # KIP-848 members get their timeouts from the coordinator
        conf.update({"session.timeout.ms": args.session_timeout_ms,
                     "heartbeat.interval.ms": max(100, args.session_timeout_ms // 6)})
    consumer = Consumer(conf)
    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    reported: list[int] | None = None

    def report_assignment() -> None:
        nonlocal reported
        now = sorted(tp.partition for tp in consumer.assignment())
        if now != reported:
            reported = now
            emit(event="assigned", partitions=now)

    consumer.subscribe([args.topic])
    consumed = 0
    try:
        while not stopping:
            msg = consumer.poll(0.1)
            report_assignment()
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                emit(event="error", code=err.name(), message=err.str())
                continue
            value = msg.value()
            emit(event="record", partition=msg.partition(), offset=msg.offset(),
                 value=value.decode() if value is not None else None)
            consumed += 1
            if args.commit_limit < 0 or consumed <= args.commit_limit:
                tp = TopicPartition(args.topic, msg.partition(), msg.offset() + 1)
                try:
                    consumer.commit(offsets=[tp], asynchronous=False)
                except KafkaException as exc:
                    emit(event="error", code=exc.args[0].name(), message=exc.args[0].str())
                else:
                    emit(event="committed", partition=tp.partition, offset=tp.offset)
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
