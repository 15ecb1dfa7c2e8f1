"""Options of the ``tidelog`` Spark source, with the names and meanings of Spark's own Kafka source.

Pure: parsing and validation only; offsets are resolved against a cluster in ``offsets.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipelines.tidelog_source.errors import OptionError
from pipelines.tidelog_source.security import SecurityOptions, parse_security_options

EARLIEST = -2
LATEST = -1
#: kafka.isolation.level's values (spark-sql-kafka passes it to its consumers; read_uncommitted is the default)
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: dict[str, list[int]] | None = None
    starting: Any = "latest"  # "earliest" | "latest" | {topic: {partition: offset}}
    ending: Any = "latest"
    starting_timestamp: int | None = None
    starting_by_timestamp: dict[str, dict[str, int]] | None = None
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_bytes_per_fetch: int = 8 * 1024 * 1024
    commit_to_group: str | None = None  # streaming: commit each finished micro-batch's offsets to this group
    #: kafka.isolation.level: read_committed reads up to the last stable offset, without aborted records
    isolation_level: str = "read_uncommitted"
    #: kafka.security.protocol, kafka.sasl.*, kafka.ssl.* (``security.py``); its repr hides the password
    security: SecurityOptions = SecurityOptions()

    def matches(self, topic: str) -> bool:
        if self.subscribe:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        return self.assign is not None and topic in self.assign


def _bool(value: str | None, default: bool, name: str) -> bool:
    if value is None:
        return default
    v = str(value).strip().lower()
    if v not in ("true", "false"):
        raise OptionError(f"option {name} must be true or false, got {value!r}")
    return v == "true"


def _offsets(value: str | None, name: str, default: str) -> Any:
    if value is None:
        return default
    v = value.strip()
    if v.lower() in ("earliest", "latest"):
        return v.lower()
    try:
        parsed = json.loads(v)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name} must be earliest, latest or JSON like "
                          f'{{"topic":{{"0":23}}}}, got {value!r}') from exc
    if not isinstance(parsed, dict) or not all(isinstance(p, dict) for p in parsed.values()):
        raise OptionError(f"option {name} JSON must map topics to {{partition: offset}}")
    out: dict[str, dict[str, int]] = {}
    for topic, parts in parsed.items():
        out[topic] = {}
        for p, off in parts.items():
            if not str(p).lstrip("-").isdigit() or not isinstance(off, int):
                raise OptionError(f"option {name}: bad entry {topic}/{p}={off!r}")
            out[topic][str(int(p))] = off  # -2 earliest, -1 latest, as in Spark's Kafka source
    return out


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    opts = {k.lower(): v for k, v in options.items()}
    servers = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
    if not servers:
        raise OptionError("option bootstrap.servers is required (broker host:port list)")
    strategies = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
    if len(strategies) != 1:
        raise OptionError("exactly one of subscribe, subscribePattern or assign is required")
    subscribe: tuple[str, ...] = ()
    pattern = None
    assign = None
    if "subscribe" in strategies:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise OptionError("option subscribe lists no topic")
    elif "subscribepattern" in strategies:
        pattern = opts["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option subscribePattern is not a valid regex: {exc}") from exc
    else:
        try:
            raw = json.loads(opts["assign"])
        except json.JSONDecodeError as exc:
            raise OptionError('option assign must be JSON like {"topic":[0,1]}') from exc
        if not isinstance(raw, dict) or not all(isinstance(v, list) for v in raw.values()):
            raise OptionError('option assign must be JSON like {"topic":[0,1]}')
        assign = {t: [int(p) for p in ps] for t, ps in raw.items()}
    ending = _offsets(opts.get("endingoffsets"), "endingOffsets", "latest")
    if streaming and opts.get("endingoffsets"):
        raise OptionError("endingOffsets is for batch queries only")
    if ending == "earliest":
        raise OptionError("endingOffsets cannot be earliest")
    ts = opts.get("startingtimestamp")
    by_ts = opts.get("startingoffsetsbytimestamp")
    max_per_trigger = opts.get("maxoffsetspertrigger")
    if max_per_trigger is not None and (not max_per_trigger.isdigit() or int(max_per_trigger) <= 0):
        raise OptionError(f"option maxOffsetsPerTrigger must be a positive integer, got {max_per_trigger!r}")
    group = opts.get("commitoffsetstogroup")
    if group is not None and (not streaming or not group.strip()):
        raise OptionError("option commitOffsetsToGroup takes a group id and is for streaming queries only")
    min_parts = opts.get("minpartitions")
    if min_parts is not None and (not min_parts.isdigit() or int(min_parts) <= 0):
        raise OptionError(f"option minPartitions must be a positive integer, got {min_parts!r}")
    isolation = (opts.get("kafka.isolation.level") or "read_uncommitted").strip().lower()
    if isolation not in ISOLATION_LEVELS:
        raise OptionError(f"option kafka.isolation.level must be read_uncommitted or read_committed, "
                          f"got {opts['kafka.isolation.level']!r}")
    return SourceOptions(
        bootstrap_servers=servers,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=_offsets(opts.get("startingoffsets"), "startingOffsets", "latest" if streaming else "earliest"),
        ending=ending,
        starting_timestamp=int(ts) if ts is not None else None,
        starting_by_timestamp=json.loads(by_ts) if by_ts else None,
        max_offsets_per_trigger=int(max_per_trigger) if max_per_trigger else None,
        fail_on_data_loss=_bool(opts.get("failondataloss"), True, "failOnDataLoss"),
        include_headers=_bool(opts.get("includeheaders"), False, "includeHeaders"),
        min_partitions=int(min_parts) if min_parts else None,
        commit_to_group=group.strip() if group else None,
        isolation_level=isolation,
        security=parse_security_options(opts),
    )
