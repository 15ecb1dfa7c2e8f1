"""Producer settings Kafka refuses are refused before anything connects."""

from __future__ import annotations

import pytest

from shared.client import Producer


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"acks": "2"}, "acks must be"),
    ({"acks": "1", "enable_idempotence": True}, "requires acks='all'"),
    ({"max_in_flight_requests_per_connection": 0}, "at least 1"),
    ({"delivery_timeout_ms": 1000, "linger_ms": 5, "request_timeout_ms": 1000}, "linger_ms \\+ request_timeout_ms"),
])
def test_invalid_settings_raise_value_error(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        Producer("127.0.0.1:1", **kwargs)
