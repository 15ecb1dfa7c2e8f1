"""Topic configs: every accepted one is honoured or refused; min.insync.replicas against the RF."""

from __future__ import annotations

import pytest

from services.broker.log import PartitionLog
from shared.config import (
    TOPIC_CONFIGS,
    UNSUPPORTED_CONFIGS,
    LogConfig,
    check_min_insync_replicas,
    validate_topic_configs,
)
from shared.errors import InvalidConfigError
from shared.records import encode_batch


def test_unsupported_configs_are_refused_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(UNSUPPORTED_CONFIGS, "message.downconversion.enable", "no down-conversion here")
    assert "message.downconversion.enable" not in TOPIC_CONFIGS
    with pytest.raises(InvalidConfigError, match="not supported") as err:
        validate_topic_configs({"message.downconversion.enable": "0"})
    assert "no down-conversion here" in str(err.value)


def test_a_stored_override_refused_later_does_not_break_the_log_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(UNSUPPORTED_CONFIGS, "message.downconversion.enable", "no down-conversion here")
    configs = {"message.downconversion.enable": "true", "segment.index.bytes": "80", "file.delete.delay.ms": "5"}
    c = LogConfig.from_topic_configs(configs)
    assert c.segment_index_bytes == 80 and c.extra["file.delete.delay.ms"] == 5


def test_min_insync_replicas_above_the_replication_factor_names_both_numbers() -> None:
    check_min_insync_replicas({"min.insync.replicas": 3}, 3)
    check_min_insync_replicas({}, 1)
    with pytest.raises(InvalidConfigError, match=r"min.insync.replicas=3 .* replication factor 2"):
        check_min_insync_replicas({"min.insync.replicas": 3}, 2)


def test_segment_index_bytes_rolls_the_segment_when_an_index_is_full(tmp_path) -> None:
    # 24 bytes: 3 offset-index entries (8 bytes) or 2 time-index entries (12 bytes), whichever fills first.
    config = LogConfig.from_topic_configs({"segment.index.bytes": "24", "index.interval.bytes": "0"})
    log = PartitionLog(str(tmp_path / "t-0"), config)
    for i in range(6):
        log.append_as_leader(encode_batch([(1_700_000_000_000 + i, b"k", b"v", None)]))
    assert len(log.segments) == 3  # time index: 2 growing timestamps per segment
    assert all(len(s.time_index) <= 2 and len(s.offset_index) <= 3 for s in log.segments)
    log.close()


def test_numeric_configs_are_int64_and_never_booleans_or_fractions() -> None:
    assert validate_topic_configs({"retention.ms": "9223372036854775807"})["retention.ms"] == 2**63 - 1
    for bad in ("9223372036854775808", True, "true", 1.5, "1e3", ""):
        with pytest.raises(InvalidConfigError):
            validate_topic_configs({"retention.ms": bad})
