"""The broker's storage: segments, indexes and partition logs (files and bytes only, no networking)."""

from services.broker.log.partition_log import AppendInfo, FetchResult, PartitionLog
from services.broker.log.segment import LogSegment

__all__ = ["AppendInfo", "FetchResult", "LogSegment", "PartitionLog"]
