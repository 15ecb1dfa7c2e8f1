"""The console's page logic without a cluster: the message browser's paging over a fake log (one
partition and all, forward, back, from the end, with a filter), the messages query string, the forms'
parsing (configs, offset resets, quotas, produced records, transaction aborts), the lag sparkline, the
transactions pages (a transactional id with markup shown escaped; a hanging transaction aborted only after
its producer id is typed, against a fake REST API), and the console's boundary (it imports nothing that
reaches etcd or another service's internals)."""

from __future__ import annotations

import ast
import os
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from services.console import transactions as transactions_page
from services.console.browse import Query, browse, parse_timestamp
from services.console.display import encode_cursor
from services.console.groups import LagWatch, reset_body, sparkline
from services.console.logs import ReadResult
from services.console.messages import record_to_send
from services.console.quotas import alteration, entity_label
from services.console.topics import parse_configs
from services.console.transactions import STATES, abort_body, hanging_query, split_partition
from services.console.upstream import UpstreamError
from services.console.web import templates
from shared.records.record import Record
from shared.types import TopicPartition

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FakeLog:
    """Partitions of records whose value is ``p<partition>-<offset>``, timestamps interleaving partitions."""

    def __init__(self, sizes: dict[int, tuple[int, int]]) -> None:
        self.sizes = sizes  # partition -> (log start, log end)

    def bounds(self, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
        return {p: self.sizes[p] for p in partitions}

    def offsets_for_time(self, topic: str, partitions: list[int], ts: int) -> dict[int, int]:
        return {p: (ts // 10 if ts // 10 < self.sizes[p][1] else -1) for p in partitions}

    def read(self, tp: TopicPartition, start: int, end: int, limit: int, keep=None, budget_s: float = 1) -> ReadResult:
        got, scanned = [], 0
        for off in range(start, end):
            scanned += 1
            rec = Record(off, off * 10 + tp.partition, None, f"p{tp.partition}-{off}".encode(), ())
            if keep is None or keep(rec):
                got.append(rec)
                if len(got) == limit:
                    return ReadResult(got, off + 1, scanned, off + 1 < end)
        return ReadResult(got, end, scanned, False)


def offsets(page: dict) -> list[tuple[int, int]]:
    return [(p, r.offset) for p, r in page["records"]]


def test_one_partition_forward_and_back() -> None:
    log = FakeLog({0: (5, 305)})
    first = browse(log, "t", [0], Query(0, "start"))
    assert offsets(first)[0] == (0, 5) and len(first["records"]) == 100 and first["prev"] is None
    assert first["next"] == {0: 105}
    second = browse(log, "t", [0], Query(0, "start", cursor=first["next"]))
    assert offsets(second)[0] == (0, 105) and second["prev"] == {0: 5}
    last = browse(log, "t", [0], Query(0, "start", cursor={0: 205}))
    assert offsets(last)[-1] == (0, 304) and last["next"] is None


def test_from_the_end_shows_the_last_page() -> None:
    page = browse(FakeLog({0: (0, 1000)}), "t", [0], Query(0, "end"))
    assert offsets(page)[0] == (0, 900) and offsets(page)[-1] == (0, 999)
    assert page["next"] is None and page["prev"] == {0: 800}


def test_deep_offset_reads_only_the_page() -> None:
    page = browse(FakeLog({0: (0, 10**9)}), "t", [0], Query(0, "offset", offset=500_000_000))
    assert offsets(page)[0] == (0, 500_000_000) and len(page["records"]) == 100 and page["scanned"] == 100


def test_all_partitions_merge_by_timestamp_and_continue_where_each_stopped() -> None:
    log = FakeLog({0: (0, 150), 1: (0, 150), 2: (0, 10)})
    page = browse(log, "t", [0, 1, 2], Query(None, "start"))
    stamps = [r.timestamp for _, r in page["records"]]
    assert stamps == sorted(stamps) and len(stamps) == 100
    shown = {(p, r.offset) for p, r in page["records"]}
    nxt = browse(log, "t", [0, 1, 2], Query(None, "start", cursor=page["next"]))
    assert not shown & {(p, r.offset) for p, r in nxt["records"]}  # nothing twice
    # walking every page reaches every record exactly once
    seen, cursor = set(), None
    for _ in range(10):
        pg = browse(log, "t", [0, 1, 2], Query(None, "start", cursor=cursor))
        batch = {(p, r.offset) for p, r in pg["records"]}
        assert not seen & batch
        seen |= batch
        if pg["next"] is None:
            break
        cursor = pg["next"]
    assert len(seen) == 310


def test_filter_scans_past_non_matching_records() -> None:
    page = browse(FakeLog({0: (0, 5000)}), "t", [0], Query(0, "start", filter="p0-4321"))
    assert offsets(page) == [(0, 4321)] and page["scanned"] == 5000 and page["next"] is None


def test_timestamp_mode_starts_at_the_broker_answer() -> None:
    page = browse(FakeLog({0: (0, 500)}), "t", [0], Query(0, "timestamp", timestamp=2000))
    assert offsets(page)[0] == (0, 200)
    past_the_end = browse(FakeLog({0: (0, 500)}), "t", [0], Query(0, "timestamp", timestamp=99_999))
    assert past_the_end["records"] == []


def test_query_parse_and_params_round_trip() -> None:
    q = Query.parse({"partition": "2", "mode": "offset", "offset": "40", "filter": "x", "format": "hex",
                     "cursor": encode_cursor({2: 41})})
    assert (q.partition, q.mode, q.offset, q.filter, q.format, q.cursor) == (2, "offset", 40, "x", "hex", {2: 41})
    assert "partition=2" in q.params() and "cursor=9" in q.params(cursor="9")
    assert Query.parse({}).partition is None and Query.parse({}).mode == "end"
    for bad in ({"mode": "sideways"}, {"format": "xml"}, {"mode": "offset"}, {"mode": "timestamp"},
                {"partition": "-1"}, {"offset": "ten"}, {"cursor": "nonsense"}):
        with pytest.raises(ValueError):
            Query.parse(bad)


def test_parse_timestamp() -> None:
    assert parse_timestamp("1700000000000") == 1_700_000_000_000
    assert parse_timestamp("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert parse_timestamp("2023-11-14T22:13:20") == 1_700_000_000_000  # UTC unless it says
    assert parse_timestamp("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    assert parse_timestamp("") is None
    with pytest.raises(ValueError):
        parse_timestamp("yesterday")


def test_record_to_send_from_a_form_and_from_json() -> None:
    assert record_to_send({"key": "", "value": "v", "headers": "a: 1", "partition": ""}) == (
        None, b"v", [("a", b"1")], None)
    assert record_to_send({"key": "k", "null_value": "1", "partition": "3"}) == (b"k", None, [], 3)
    assert record_to_send({"value": "v", "headers": {"h": "x"}, "partition": 0}) == (None, b"v", [("h", b"x")], 0)
    with pytest.raises(ValueError):
        record_to_send({"partition": "first"})


def test_parse_configs() -> None:
    assert parse_configs("retention.ms=1000\n\n cleanup.policy = compact ") == {
        "retention.ms": "1000", "cleanup.policy": "compact"}
    with pytest.raises(ValueError):
        parse_configs("retention.ms")


def test_reset_body() -> None:
    assert reset_body({"topic": "t", "to": "earliest"}) == {"topic": "t", "to": "earliest", "execute": False}
    assert reset_body({"topic": "t", "to": "offset", "value": "7", "partitions": "0, 2", "execute": "1"}) == {
        "topic": "t", "to": "offset", "value": 7, "partitions": [0, 2], "execute": True}
    assert reset_body({"topic": "t", "to": "timestamp", "value": "2023-11-14T22:13:20Z"})["value"] == 1_700_000_000_000
    for bad in ({"to": "sideways"}, {"to": "offset", "value": "x"}, {"to": "timestamp", "value": "yesterday"}):
        with pytest.raises(ValueError):
            reset_body(bad)


def test_quota_alteration() -> None:
    assert alteration({"client-id-set": "1", "client-id": "app", "key": "producer_byte_rate", "value": "1024"}) == {
        "entity": {"client-id": "app"}, "ops": [{"key": "producer_byte_rate", "value": 1024.0}]}
    assert alteration({"client-id": "app", "key": "producer_byte_rate", "value": "1024"})["entity"] == {
        "client-id": "app"}  # a typed name counts without its box checked
    assert alteration({"user-set": "1", "user": "", "key": "request_percentage", "remove": "1"}) == {
        "entity": {"user": None}, "ops": [{"key": "request_percentage", "remove": True}]}
    for bad in ({"key": "producer_byte_rate", "value": "1"}, {"user-set": "1", "user": "a", "value": "lots"}):
        with pytest.raises(ValueError):
            alteration(bad)
    assert entity_label({"user": None, "client-id": "app"}) == "user=<default>, client-id=app"


def test_sparkline() -> None:
    assert sparkline([(0, 5)]) == ""
    points = sparkline([(0, 0), (1, 10), (2, 5)]).split()
    assert points[0] == "0.0,39.0" and points[1] == "120.0,1.0" and points[2].startswith("240.0,")


def test_lag_watch_keeps_samples_of_watched_groups_only() -> None:
    w = LagWatch(keep=3, watch_s=100)
    desc = {"partitions": [{"topic": "t", "partition": 0, "lag": 5}, {"topic": "t", "partition": 1, "lag": None}]}
    w.look("g", 0)
    for at in range(5):
        w.record("g", at, desc)
    assert w.totals("g") == [(2, 5), (3, 5), (4, 5)] and w.of_partition("g", "t-0")[-1] == (4, 5)
    assert w.of_partition("g", "t-1") == []
    assert w.watched(50) == ["g"] and w.watched(101) == [] and w.totals("g") == []


def _imports(path: str) -> set[str]:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_console_reaches_the_cluster_only_through_public_apis() -> None:
    root = os.path.join(REPO, "services", "console")
    forbidden = ("aetcd", "etcd3", "shared.metadata", "shared.service", "services.controller", "services.broker",
                 "services.coordinator", "services.quota", "services.cleaner", "shared.proto.coordinator_pb2",
                 "shared.proto.quota_pb2", "shared.proto.replication_pb2")
    bad = []
    for name in sorted(os.listdir(root)):
        if name.endswith(".py"):
            for module in _imports(os.path.join(root, name)):
                if any(module == f or module.startswith(f + ".") for f in forbidden):
                    bad.append(f"{name} imports {module}")
    # shared.service: only its two small helpers (ready file, lifeline), which touch no etcd
    assert bad == ["main.py imports shared.service"]


def test_compaction_page_shows_each_logs_last_cleaning() -> None:
    log = {"dirty_ratio": 0.25, "compaction_delay_ms": 0, "first_dirty": 10, "first_uncleanable": 20, "size_bytes": 9}
    broker = {"broker": "127.0.0.1:1", "broker_id": 1, "error": None, "cleaned_bytes": 5, "jobs_done": 1,
              "jobs_refused": 0, "jobs": [], "quarantined": [], "workers": [],
              "logs": [dict(log, log="a-0", last_cleaned_ms=1_700_000_000_123),
                       dict(log, log="<b>-0", last_cleaned_ms=None), dict(log, log="old-0")]}  # old REST: no field
    page = templates().get_template("compaction.html").render(path="/compaction", title="Compaction",
                                                              brokers=[broker])
    assert "<th scope=\"col\">Last cleaned</th>" in page
    assert "2023-11-14 22:13:20.123Z" in page
    assert page.count(">never</td>") == 2 and "&lt;b&gt;-0" in page


MARKUP_ID = '"><script>window.__pwned = 1</script><b id="x">'


def test_transactions_pages_escape_a_transactional_id_with_markup() -> None:
    row = {"transactional_id": MARKUP_ID, "coordinator": "coordinator-1", "producer_id": 4000, "state": "Ongoing"}
    hanging = {"max_transaction_timeout_ms": 900000, "hanging": [
        {"topic": "t<i>", "partition": 2, "producer_id": 7, "producer_epoch": 1, "coordinator_epoch": 0,
         "start_offset": 42, "last_timestamp": 1_700_000_000_123, "duration_ms": 5}]}
    d = {"states": ["Ongoing"], "transactions": [row], "hanging": hanging, "search": ("t<i>", None), "error": None}
    page = templates().get_template("transactions.html").render(path="/transactions", title="Transactions", d=d,
                                                                 all_states=STATES, error=None, done=None)
    assert "<script>window" not in page and 'id="x"' not in page
    assert "&#34;&gt;&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in page
    assert 'href="/transactions/%22%3E%3Cscript%3E' in page  # the link's path escaped too
    assert '<option value="Ongoing" selected>' in page and 'aria-current="page">Transactions</a>' in page
    assert "t&lt;i&gt;-2" in page and 'name="producer_id" value="7"' in page and "2023-11-14 22:13:20.123Z" in page
    described = {"transactional_id": MARKUP_ID, "coordinator": "coordinator-1", "producer_id": 4000,
                 "producer_epoch": 3, "state": "Ongoing", "transaction_timeout_ms": 60000,
                 "transaction_start_time_ms": 1_700_000_000_123, "topic_partitions": ["orders-1", "a-b-10"]}
    parts = [{"name": n, "topic": split_partition(n)[0], "partition": split_partition(n)[1]}
             for n in described["topic_partitions"]]
    page = templates().get_template("transaction.html").render(
        path="/transactions/x", title=f"Transaction {MARKUP_ID}",
        d={"transaction": described, "running_ms": 1500, "partitions": parts})
    assert "<script>window" not in page and 'id="x"' not in page and "&lt;script&gt;" in page
    assert '<a href="/topics/a-b">a-b</a></td><td>10</td>' in page and "(running for 1.5 s)" in page


def test_transaction_forms() -> None:
    assert split_partition("a-b-10") == ("a-b", 10) and split_partition("odd") == ("odd", None)
    assert hanging_query({"topic": " t "}) == ("t", None) and hanging_query({"topic": ""}) is None
    assert hanging_query({"topic": "t", "max_transaction_timeout_ms": "0"}) == ("t", 0)
    row = {"topic": "t", "partition": "2", "producer_id": "7", "producer_epoch": "1", "coordinator_epoch": "-1"}
    assert abort_body({**row, "confirm": " 7 "}) == {"topic": "t", "partition": 2, "producer_id": 7,
                                                     "producer_epoch": 1, "coordinator_epoch": -1}
    for bad in ({**row, "confirm": "8"}, {**row, "confirm": ""}, {**row, "partition": "x", "confirm": "7"},
                {**row, "topic": "", "confirm": "7"}):
        with pytest.raises(ValueError):
            abort_body(bad)
    with pytest.raises(ValueError):
        hanging_query({"topic": "t", "max_transaction_timeout_ms": "soon"})


class FakeTxnRest:
    """The REST routes of the transactions page: one hanging transaction on ``t`` until it is aborted."""

    def __init__(self) -> None:
        self.aborted: list[dict[str, Any]] = []

    async def transactions(self, states: list[str]) -> list[dict[str, Any]]:
        return []

    async def hanging_transactions(self, topic: str, max_ms: int | None = None) -> dict[str, Any]:
        if topic != "t":
            raise UpstreamError("UNKNOWN_TOPIC_OR_PARTITION", f"unknown topic {topic!r}", 404)
        rows = [] if self.aborted else [{"topic": "t", "partition": 0, "producer_id": 7, "producer_epoch": 1,
                                         "coordinator_epoch": -1, "start_offset": 3, "last_timestamp": -1,
                                         "duration_ms": None}]
        return {"max_transaction_timeout_ms": 900000 if max_ms is None else max_ms, "hanging": rows}

    async def abort_transaction(self, body: dict[str, Any]) -> dict[str, Any]:
        self.aborted.append(body)
        return {**body, "aborted": True}


def test_abort_a_hanging_transaction_only_after_typing_its_producer_id() -> None:
    app = FastAPI()
    app.state.rest, app.state.templates = FakeTxnRest(), templates()
    app.include_router(transactions_page.router)
    client = TestClient(app)
    page = client.get("/transactions", params={"topic": "t"})
    assert page.status_code == 200 and 'id="hanging"' in page.text and 'for="abort-confirm-1"' in page.text
    row = {"topic": "t", "partition": "0", "producer_id": "7", "producer_epoch": "1", "coordinator_epoch": "-1",
           "max_transaction_timeout_ms": "900000"}
    refused = client.post("/transactions/abort", data={**row, "confirm": "70"})
    assert refused.status_code == 400 and '<strong class="code">INVALID_REQUEST</strong>' in refused.text
    assert app.state.rest.aborted == [] and 'id="abort-confirm-1"' in refused.text  # the row still offered
    done = client.post("/transactions/abort", data={**row, "confirm": "7"}, follow_redirects=True)
    assert app.state.rest.aborted == [{"topic": "t", "partition": 0, "producer_id": 7, "producer_epoch": 1,
                                       "coordinator_epoch": -1}]
    assert "Aborted the transaction of producer 7 on t-0." in done.text and "No hanging transaction on t" in done.text
    unknown = client.get("/transactions", params={"topic": "nope"})
    assert unknown.status_code == 404 and '<strong class="code">UNKNOWN_TOPIC_OR_PARTITION</strong>' in unknown.text
