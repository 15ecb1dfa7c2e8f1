"""Kafka error codes and the exception hierarchy every service and client shares.

This module is the one owner of the mapping between Python exceptions and the
error codes that travel inside gRPC responses (Kafka's numbers and names):
``ErrorCode`` (the numbers), ``RETRIABLE`` (Kafka's retriable set), every
``TidelogError`` subclass (no other module defines one: they import them from
here) and ``ERROR_CLASSES``, the one explicit table from a code to the class a
receiver raises (``error_for``). It must not import gRPC, etcd or anything
service-specific.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType


class ErrorCode(IntEnum):
    """Kafka's protocol error codes up to 120, with Apache Kafka's names and numbers (``Errors.java``)."""

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
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
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
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120


#: Kafka's retriable codes (their exceptions extend ``RetriableException``): the same request may
#: succeed later, after a metadata refresh or a back-off. Every other code is final for that request.
RETRIABLE: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,  # a resend may arrive intact
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.LISTENER_NOT_FOUND,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        ErrorCode.ELECTION_NOT_NEEDED,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
    }
)


class _RetriableFlag:
    """``SomeError.retriable`` and ``exc.retriable``: is the class's (or the instance's) code retriable."""

    def __get__(self, exc: TidelogError | None, cls: type[TidelogError]) -> bool:
        return (cls.code if exc is None else exc.code) in RETRIABLE


class TidelogError(Exception):
    """Base of every error that maps to a Kafka error code; also the generic error of a code that has
    no class of its own (``TidelogError(message, code=...)``).

    ``wire_code`` is the number received from the wire: ``code`` itself, except for a number this
    version does not know, which is ``UNKNOWN_SERVER_ERROR`` here and keeps its number there."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable = _RetriableFlag()

    def __init__(self, message: str = "", *, code: ErrorCode | None = None, wire_code: int | None = None) -> None:
        super().__init__(message or self.__class__.__name__)
        if code is not None:
            self.code = code
        self.wire_code: int = int(self.code) if wire_code is None else wire_code

    def __str__(self) -> str:
        name = self.code.name if self.wire_code == self.code else f"{self.code.name} (error code {self.wire_code})"
        return f"{name}: {super().__str__()}"


# -- one class per code a receiver may want to catch (``ERROR_CLASSES``, at the end, lists them) --

class OffsetOutOfRangeError(TidelogError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class CorruptRecordError(TidelogError):
    """A batch or record failed validation (bad length, magic, CRC, varint...)."""

    code = ErrorCode.CORRUPT_MESSAGE


class UnknownTopicOrPartitionError(TidelogError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class LeaderNotAvailableError(TidelogError):
    code = ErrorCode.LEADER_NOT_AVAILABLE


class NotLeaderOrFollowerError(TidelogError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class KafkaTimeoutError(TidelogError):
    """A request or a wait timed out (Kafka's ``TimeoutException``)."""

    code = ErrorCode.REQUEST_TIMED_OUT


class RecordTooLargeError(TidelogError):
    code = ErrorCode.MESSAGE_TOO_LARGE


class NetworkError(TidelogError):
    """The connection broke before an answer arrived (Kafka's ``NetworkException``)."""

    code = ErrorCode.NETWORK_EXCEPTION


class CoordinatorLoadInProgressError(TidelogError):
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


class CoordinatorNotAvailableError(TidelogError):
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE


class NotCoordinatorError(TidelogError):
    code = ErrorCode.NOT_COORDINATOR


class InvalidTopicError(TidelogError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class NotEnoughReplicasError(TidelogError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS


class NotEnoughReplicasAfterAppendError(TidelogError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


class InvalidTimestampError(TidelogError):
    code = ErrorCode.INVALID_TIMESTAMP


class TopicExistsError(TidelogError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(TidelogError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(TidelogError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidConfigError(TidelogError):
    code = ErrorCode.INVALID_CONFIG


class InvalidReplicaAssignmentError(TidelogError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class ReassignmentError(InvalidReplicaAssignmentError):
    """A reassignment request refused. Usually INVALID_REPLICA_ASSIGNMENT; the controller also answers
    NO_REASSIGNMENT_IN_PROGRESS, UNKNOWN_TOPIC_OR_PARTITION or INVALID_REQUEST with it (``code=``)."""


class NotControllerError(TidelogError):
    code = ErrorCode.NOT_CONTROLLER


class InvalidRequestError(TidelogError):
    code = ErrorCode.INVALID_REQUEST


class OutOfOrderSequenceError(TidelogError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(TidelogError):
    code = ErrorCode.INVALID_PRODUCER_EPOCH


class StorageError(TidelogError):
    code = ErrorCode.KAFKA_STORAGE_ERROR


class FencedLeaderEpochError(TidelogError):
    code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(TidelogError):
    code = ErrorCode.UNKNOWN_LEADER_EPOCH


class StaleBrokerEpochError(TidelogError):
    """An internal request from a broker id / incarnation that is not the live registration."""

    code = ErrorCode.STALE_BROKER_EPOCH


class OffsetNotAvailableError(TidelogError):
    code = ErrorCode.OFFSET_NOT_AVAILABLE


class InvalidRecordError(TidelogError):
    """A produced batch breaks a rule of the format (Kafka's InvalidRecordException): count or offsets
    inconsistent, control bit from a client, producer fields inconsistent."""

    code = ErrorCode.INVALID_RECORD


# -- more specific errors: each is its code's class above, or carries its code per instance --

class UnreadableBatchError(CorruptRecordError):
    """A reader met a batch it cannot decode: names the topic, partition and offset, so the reader can
    report it and seek past it (as Kafka's consumer says "please seek past the record")."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        super().__init__(f"cannot read the batch at offset {offset} of {topic}-{partition}: {reason}")
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.reason = reason


class DataLossError(OffsetOutOfRangeError):
    """Offsets a query was going to read are not in the cluster any more (``pipelines.tidelog_source``)."""


class FencedError(NotControllerError):
    """A write was refused because this controller is no longer the active one (``services.controller.election``)."""


class NotActiveError(NotControllerError):
    """A REST write reached a controller while no active controller answers (``services.controller.rest``)."""


class ConflictError(InvalidRequestError):
    """A guarded write lost a race with another change (retry after re-reading) (``services.controller.election``)."""


class QuotaConfigError(InvalidRequestError):
    """A client quota entity or config is malformed (``shared.quota``)."""


class AlterPartitionError(TidelogError):
    """An ISR proposal the controller refuses; the code (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION...)
    is given per instance (``services.controller.partitions``)."""


class SaslAuthenticationFailedError(TidelogError):
    """Wrong user or password, or a server that could not prove it knows the credential (not retriable)."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED


class GroupError(TidelogError):
    """A heartbeat, commit or admin request refused with a Kafka error code, given per instance
    (``services.coordinator``)."""


#: The class a receiver raises for each code (``error_for``). A code not listed has no class of its
#: own: it is raised as a plain ``TidelogError`` carrying the code. Every class here is defined in this
#: module and its ``code`` is its key; a more specific class subclasses the class of its code.
ERROR_CLASSES: Mapping[ErrorCode, type[TidelogError]] = MappingProxyType({
    ErrorCode.OFFSET_OUT_OF_RANGE: OffsetOutOfRangeError,
    ErrorCode.SASL_AUTHENTICATION_FAILED: SaslAuthenticationFailedError,
    ErrorCode.CORRUPT_MESSAGE: CorruptRecordError,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: UnknownTopicOrPartitionError,
    ErrorCode.LEADER_NOT_AVAILABLE: LeaderNotAvailableError,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: NotLeaderOrFollowerError,
    ErrorCode.REQUEST_TIMED_OUT: KafkaTimeoutError,
    ErrorCode.MESSAGE_TOO_LARGE: RecordTooLargeError,
    ErrorCode.NETWORK_EXCEPTION: NetworkError,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: CoordinatorLoadInProgressError,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: CoordinatorNotAvailableError,
    ErrorCode.NOT_COORDINATOR: NotCoordinatorError,
    ErrorCode.INVALID_TOPIC_EXCEPTION: InvalidTopicError,
    ErrorCode.NOT_ENOUGH_REPLICAS: NotEnoughReplicasError,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: NotEnoughReplicasAfterAppendError,
    ErrorCode.INVALID_TIMESTAMP: InvalidTimestampError,
    ErrorCode.TOPIC_ALREADY_EXISTS: TopicExistsError,
    ErrorCode.INVALID_PARTITIONS: InvalidPartitionsError,
    ErrorCode.INVALID_REPLICATION_FACTOR: InvalidReplicationFactorError,
    ErrorCode.INVALID_CONFIG: InvalidConfigError,
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: InvalidReplicaAssignmentError,
    ErrorCode.NOT_CONTROLLER: NotControllerError,
    ErrorCode.INVALID_REQUEST: InvalidRequestError,
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: OutOfOrderSequenceError,
    ErrorCode.INVALID_PRODUCER_EPOCH: InvalidProducerEpochError,
    ErrorCode.KAFKA_STORAGE_ERROR: StorageError,
    ErrorCode.FENCED_LEADER_EPOCH: FencedLeaderEpochError,
    ErrorCode.UNKNOWN_LEADER_EPOCH: UnknownLeaderEpochError,
    ErrorCode.STALE_BROKER_EPOCH: StaleBrokerEpochError,
    ErrorCode.OFFSET_NOT_AVAILABLE: OffsetNotAvailableError,
    ErrorCode.INVALID_RECORD: InvalidRecordError,
})


def error_class(code: int) -> type[TidelogError]:
    """The class raised for ``code``: its own class, else ``TidelogError`` (unknown numbers too)."""
    try:
        return ERROR_CLASSES.get(ErrorCode(code), TidelogError)
    except ValueError:
        return TidelogError


def error_for(code: int, message: str = "") -> TidelogError:
    """The exception a receiver raises for a non-zero error code from the wire. A number this version
    does not know becomes ``UNKNOWN_SERVER_ERROR`` (never retried, never taken as proof of anything)
    and keeps the number in ``wire_code``."""
    try:
        ec = ErrorCode(code)
    except ValueError:
        return TidelogError(message or f"error code {code} is unknown to this version", code=ErrorCode.UNKNOWN_SERVER_ERROR,
                            wire_code=code)
    cls = ERROR_CLASSES.get(ec)
    return cls(message or ec.name) if cls is not None else TidelogError(message or ec.name, code=ec)
