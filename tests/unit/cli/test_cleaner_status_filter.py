"""`tidelog cleaner status --topic T` narrows every broker's logs, jobs and quarantined logs to T
(each broker otherwise lists its 50 __consumer_offsets logs around the one a user looks for)."""

from __future__ import annotations

from shared.cli.cleaner_cmds import only_topics


def _broker() -> dict:
    logs = [{"log": f"__consumer_offsets-{i}"} for i in range(50)] + [{"log": "kv-0"}, {"log": "kv-cache-1"}]
    return {"broker": "127.0.0.1:1", "broker_id": 1, "jobs": [{"log": "kv-0"}, {"log": "__consumer_offsets-3"}],
            "logs": logs, "quarantined": [{"log": "kv-cache-1", "reason": "bad CRC"}], "workers": []}


def test_no_topic_keeps_everything() -> None:
    report = [_broker()]
    assert only_topics(report, ()) == report


def test_topic_names_with_dashes_are_matched_whole() -> None:
    (b,) = only_topics([_broker()], ("kv",))
    assert [s["log"] for s in b["logs"]] == ["kv-0"]
    assert [j["log"] for j in b["jobs"]] == ["kv-0"] and b["quarantined"] == []
    (b,) = only_topics([_broker()], ("kv", "kv-cache"))
    assert [s["log"] for s in b["logs"]] == ["kv-0", "kv-cache-1"] and len(b["quarantined"]) == 1


def test_unreachable_broker_is_kept() -> None:
    down = {"broker": "127.0.0.1:2", "error": "UNAVAILABLE"}
    assert only_topics([down], ("kv",)) == [down]
