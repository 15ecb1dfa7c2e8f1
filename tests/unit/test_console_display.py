"""The console's pure helpers (services/console/display.py): format guessing, truncation of large and
binary values, the filter over key/value/headers, the JSON-lines form of a record, page arithmetic,
cursors, live-tail sampling and typed headers."""

from __future__ import annotations

import base64
import json

import pytest

from services.console.display import (
    PAGE_SIZE,
    decode_cursor,
    encode_cursor,
    first_offset,
    guess_format,
    matches,
    parse_headers,
    previous_page,
    record_json,
    sample,
    show,
    split_budget,
)


@pytest.mark.parametrize("data, expected", [
    (None, "null"),
    (b"", "text"),
    (b"hello world", "text"),
    (b'{"a": 1}', "json"),
    (b"  [1, 2, 3]\n", "json"),
    (b'"quoted"', "json"),
    (b"{not json", "text"),
    (b"42", "text"),  # a bare number reads better as text
    ("caf\u00e9 \u2603".encode(), "text"),
    (b"\xff\xfe\x00", "hex"),  # invalid UTF-8
    (b"ab\x00cd", "hex"),  # valid UTF-8 but a control character
    (b"line1\nline2\ttab\r\n", "text"),
])
def test_guess_format(data: bytes | None, expected: str) -> None:
    assert guess_format(data) == expected


def test_show_cuts_a_megabyte_to_the_preview() -> None:
    big = b"A" * (1024 * 1024)
    s = show(big)
    assert s.truncated and len(s.text) == 200 and s.size == len(big) and s.format == "text"
    full = show(big, limit=256 * 1024)
    assert full.truncated and len(full.text) == 256 * 1024


def test_show_keeps_short_values_whole() -> None:
    s = show(b"short")
    assert (s.text, s.truncated, s.format, s.guessed) == ("short", False, "text", "text")


def test_show_hex_of_binary_is_cut_by_bytes() -> None:
    s = show(bytes(range(256)))
    assert s.format == "hex" and s.text.startswith("00 01 02 03") and s.truncated and len(s.text) <= 200
    assert not show(b"\x00\x01", "hex").truncated


def test_show_text_of_invalid_utf8_escapes_the_bad_bytes() -> None:
    s = show(b"caf\xc3 \xff ok", "text")
    assert s.text == "caf\\xc3 \\xff ok" and s.guessed == "hex"


def test_show_json_pretty_on_the_full_page_compact_in_the_list() -> None:
    assert show(b'{"a":  [1,2]}').text == '{"a": [1, 2]}'
    assert show(b'{"a":1}', limit=10_000).text == '{\n  "a": 1\n}'


def test_show_json_asked_for_non_json_falls_back() -> None:
    assert show(b"plain", "json").format == "text"
    assert show(b"\xff", "json").format == "hex"


def test_show_null() -> None:
    assert show(None, "hex").format == "null"


def test_show_does_not_escape_markup_itself() -> None:  # the templates' autoescape does, once
    assert show(b"<script>x</script>").text == "<script>x</script>"


@pytest.mark.parametrize("needle, hit", [
    ("", True), ("ORDER", True), ("user-7", True), ("trace", True), ("abc-123", True), ("missing", False),
    ("\ufffd", True),  # a replaced bad byte of the value
])
def test_filter_reaches_key_value_and_headers(needle: str, hit: bool) -> None:
    assert matches(needle, b"user-7", b'{"order": 1}\xff', [("trace", b"abc-123"), ("empty", None)]) is hit


def test_filter_with_null_key_and_value() -> None:
    assert not matches("x", None, None, ())


def test_record_json_names_each_encoding() -> None:
    line = record_json("t", 1, 5, 1000, None, b"\xff\x00", [("h", b"v"), ("n", None)])
    assert line["key"] is None and line["key_encoding"] == "null"
    assert base64.b64decode(line["value"]) == b"\xff\x00" and line["value_encoding"] == "base64"
    assert line["headers"] == [{"key": "h", "value": "v", "encoding": "utf-8"},
                               {"key": "n", "value": None, "encoding": "null"}]
    json.dumps(line)


@pytest.mark.parametrize("mode, offset, expected", [
    ("start", None, 10), ("end", None, 400), ("offset", 250, 250), ("offset", 5, 10), ("offset", 9999, 500),
])
def test_first_offset(mode: str, offset: int | None, expected: int) -> None:
    assert first_offset(mode, 10, 500, offset) == expected


def test_first_offset_of_a_short_log_from_the_end_is_its_start() -> None:
    assert first_offset("end", 0, 30) == 0


def test_first_offset_needs_an_offset() -> None:
    with pytest.raises(ValueError):
        first_offset("offset", 0, 10)
    with pytest.raises(ValueError):
        first_offset("sideways", 0, 10)


def test_previous_page() -> None:
    assert previous_page(10, 10) is None
    assert previous_page(150, 10) == 50
    assert previous_page(60, 10) == 10
    assert previous_page(1_000_000_100, 0, PAGE_SIZE) == 1_000_000_000


def test_split_budget() -> None:
    assert split_budget(100, 1) == 100 and split_budget(100, 8) == 100
    assert split_budget(100, 100) == 10 and split_budget(100, 20) == 20
    assert split_budget(100, 0) == 0


def test_cursor_round_trip_and_refusals() -> None:
    assert decode_cursor(encode_cursor({2: 7, 0: 15})) == {0: 15, 2: 7}
    assert encode_cursor({}) == "" and decode_cursor("") == {}
    assert decode_cursor("0:1,,2:3") == {0: 1, 2: 3}
    for bad in ("0", "a:1", "0:x", "0:1,2"):
        with pytest.raises(ValueError):
            decode_cursor(bad)


def test_tail_sample_keeps_the_newest_and_counts_the_rest() -> None:
    tick = sample(list(range(2000)), 50)
    assert tick.shown == list(range(1950, 2000)) and tick.seen == 2000 and tick.skipped == 1950
    assert sample([1, 2], 50).skipped == 0


def test_parse_headers() -> None:
    assert parse_headers("trace: 42\n\n  a=b=c \nurl: http://x:1") == [
        ("trace", b"42"), ("a", b"b=c"), ("url", b"http://x:1")]
    with pytest.raises(ValueError):
        parse_headers("no separator")


# -- services/console/metrics.py ------------------------------------------------------------------------

SCRAPE = """# HELP tidelog_broker_topic_bytes_in_total Bytes appended by producers (BytesInPerSec)
# TYPE tidelog_broker_topic_bytes_in_total counter
tidelog_broker_topic_bytes_in_total{topic="a"} 1000.0
tidelog_broker_topic_bytes_in_total{topic="b"} 500.0
# TYPE tidelog_broker_topic_bytes_out_total counter
tidelog_broker_topic_bytes_out_total{topic="a"} 300.0
# TYPE tidelog_log_size_bytes gauge
tidelog_log_size_bytes{partition="0",topic="a"} 4096.0
tidelog_log_size_bytes{partition="1",topic="a"} 1024.0
# TYPE tidelog_network_requests_total counter
tidelog_network_requests_total{request="Produce"} 7.0
"""


def test_broker_sample_parses_the_counters_and_log_sizes() -> None:
    from services.console.metrics import BrokerSample

    s = BrokerSample.parse(SCRAPE)
    assert s.bytes_in == {"a": 1000.0, "b": 500.0} and s.bytes_out == {"a": 300.0}
    assert s.log_size == {("a", 0): 4096.0, ("a", 1): 1024.0} and s.disk_bytes == 5120.0


def test_rate_history_turns_counters_into_rates_over_an_hour() -> None:
    from services.console.metrics import BrokerSample, RateHistory, polyline

    h = RateHistory(window_s=3600)
    h.add(0, [BrokerSample({"a": 0.0}, {"a": 0.0})])
    h.add(10, [BrokerSample({"a": 1000.0}, {"a": 500.0}), BrokerSample({"a": 1000.0}, {})])
    h.add(20, [BrokerSample({"a": 10.0}, {"a": 600.0})])  # a broker restarted: its counter went down
    assert h.series() == [{"at": 10, "in": 200.0, "out": 50.0}, {"at": 20, "in": 0.0, "out": 10.0}]
    assert h.topic_rates() == {"a": 0.0}
    h.add(4000, [BrokerSample({"a": 20.0}, {})])
    assert [p.at for p in h.points] == [4000]  # older than an hour: gone
    assert polyline([1.0]) == "" and polyline([0.0, 2.0]).split() == ["0.0,39.0", "240.0,1.0"]
