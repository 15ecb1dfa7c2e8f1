"""Kafka error codes and the exception hierarchy every service and client shares.

This module is the one owner of the mapping between Python exceptions and the
error codes that travel inside gRPC responses (Kafka's numbers and names).
It must not import gRPC, etcd or anything service-specific.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Kafka's protocol error codes (same numbers as Apache Kafka)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_CONFIG = 40
    REBALANCE_IN_PROGRESS = 27
    UNKNOWN_MEMBER_ID = 25
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNKNOWN_TOPIC_ID = 100
    FENCED_INSTANCE_ID = 82
    UNKNOWN_PRODUCER_ID = 59
    KAFKA_STORAGE_ERROR = 56
    OFFSET_NOT_AVAILABLE = 78
    INELIGIBLE_REPLICA = 107
    INVALID_UPDATE_VERSION = 95
    NEW_LEADER_ELECTED = 108
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELECTION_NOT_NEEDED = 84
    INVALID_RECORD = 87
    # consumer groups (issue 10)
    OFFSET_METADATA_TOO_LARGE = 12
    INVALID_GROUP_ID = 24
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    GROUP_MAX_SIZE_REACHED = 81
    PRODUCER_FENCED = 90
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    STALE_BROKER_EPOCH = 77
    # follower fetch sessions (KIP-227)
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71


#: Codes a client may retry after refreshing metadata or backing off.
RETRIABLE = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,  # Kafka marks it retriable: a resend may arrive intact
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.BROKER_NOT_AVAILABLE,
    }
)


class TidelogError(Exception):
    """Base of every error that maps to a Kafka error code."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "", *, code: ErrorCode | None = None) -> None:
        super().__init__(message or self.__class__.__name__)
        if code is not None:
            self.code = code

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE

    def __str__(self) -> str:
        return f"{self.code.name}: {super().__str__()}"


class CorruptRecordError(TidelogError):
    """A batch or record failed validation (bad length, magic, CRC, varint...)."""

    code = ErrorCode.CORRUPT_MESSAGE


class RecordTooLargeError(TidelogError):
    code = ErrorCode.MESSAGE_TOO_LARGE


class OffsetOutOfRangeError(TidelogError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class UnknownTopicOrPartitionError(TidelogError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class NotLeaderOrFollowerError(TidelogError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class InvalidConfigError(TidelogError):
    code = ErrorCode.INVALID_CONFIG


class InvalidTopicError(TidelogError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class InvalidTimestampError(TidelogError):
    code = ErrorCode.INVALID_TIMESTAMP


class FencedLeaderEpochError(TidelogError):
    code = ErrorCode.FENCED_LEADER_EPOCH


class StorageError(TidelogError):
    code = ErrorCode.KAFKA_STORAGE_ERROR


class StaleBrokerEpochError(TidelogError):
    """An internal request from a broker id / incarnation that is not the live registration."""

    code = ErrorCode.STALE_BROKER_EPOCH


def error_for(code: int, message: str = "") -> TidelogError:
    """The exception a client raises for a non-zero error code from the wire."""
    try:
        ec = ErrorCode(code)
    except ValueError:
        ec = ErrorCode.UNKNOWN_SERVER_ERROR
    for cls in TidelogError.__subclasses__():
        if cls.code == ec:
            return cls(message or ec.name)
    return TidelogError(message or ec.name, code=ec)


class InvalidRecordError(TidelogError):
    """A produced batch breaks a rule of the format (Kafka's InvalidRecordException): count or offsets
    inconsistent, control bit from a client, producer fields inconsistent."""

    code = ErrorCode.INVALID_RECORD


class UnreadableBatchError(CorruptRecordError):
    """A reader met a batch it cannot decode: names the topic, partition and offset, so the reader can
    report it and seek past it (as Kafka's consumer says "please seek past the record")."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        super().__init__(f"cannot read the batch at offset {offset} of {topic}-{partition}: {reason}")
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.reason = reason

