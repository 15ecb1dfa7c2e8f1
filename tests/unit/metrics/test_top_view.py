"""`tidelog top`'s figures from two scrapes."""

from __future__ import annotations

from shared.metrics import parse
from shared.top_view import broker_row, group_lags, group_rows

INF = "+Inf"


def broker_text(records: int, bytes_in: int, buckets: dict[str, int], urp: int = 0) -> str:
    lines = [f'tidelog_broker_topic_messages_in_total{{topic="t"}} {records}',
             f'tidelog_broker_topic_bytes_in_total{{topic="t"}} {bytes_in}',
             'tidelog_broker_topic_bytes_out_total{topic="t"} 0',
             f"tidelog_replica_manager_under_replicated_partitions {urp}"]
    lines += [f'tidelog_network_request_total_time_seconds_bucket{{le="{le}",request="Produce"}} {n}'
              for le, n in buckets.items()]
    return "\n".join(lines) + "\n"


def test_rates_and_interval_quantiles() -> None:
    prev = parse(broker_text(1000, 1_000_000, {"0.001": 100, "0.01": 100, INF: 100}))
    cur = parse(broker_text(3000, 3_000_000, {"0.001": 100, "0.01": 200, INF: 200}, urp=1))
    row = broker_row("1", prev, cur, 2.0)
    assert row.records_in_s == 1000 and row.mb_in_s == 1.0
    assert row.produce_p50_ms is not None and 1.0 < row.produce_p50_ms <= 10.0  # only this interval's requests
    assert row.fetch_p99_ms is None and row.under_replicated == 1
    assert broker_row("2", None, None, 1.0).up is False


def test_group_lag_and_trend() -> None:
    a = parse('tidelog_consumer_group_lag{group="g",topic="t",partition="0"} 5\n'
              'tidelog_consumer_group_lag{group="g",topic="t",partition="1"} 7\n')
    lags = group_lags([a])
    assert lags == {"g": 12}
    rows = group_rows({"g": 20}, lags)
    assert rows[0].delta == -8 and rows[0].trend == "↓"
    assert group_rows(None, lags)[0].trend == "="
