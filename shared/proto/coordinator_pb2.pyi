from shared.proto import tidelog_pb2 as _tidelog_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TopicPartitions(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class ConsumerGroupHeartbeatRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "member_epoch", "instance_id", "rack_id", "rebalance_timeout_ms", "subscribed_topic_names", "subscribed_topic_regex", "server_assignor", "owned_partitions", "client_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    RACK_ID_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_TOPIC_NAMES_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_TOPIC_REGEX_FIELD_NUMBER: _ClassVar[int]
    SERVER_ASSIGNOR_FIELD_NUMBER: _ClassVar[int]
    OWNED_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str
    rack_id: str
    rebalance_timeout_ms: int
    subscribed_topic_names: _containers.RepeatedScalarFieldContainer[str]
    subscribed_topic_regex: str
    server_assignor: str
    owned_partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    client_id: str
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., instance_id: _Optional[str] = ..., rack_id: _Optional[str] = ..., rebalance_timeout_ms: _Optional[int] = ..., subscribed_topic_names: _Optional[_Iterable[str]] = ..., subscribed_topic_regex: _Optional[str] = ..., server_assignor: _Optional[str] = ..., owned_partitions: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., client_id: _Optional[str] = ...) -> None: ...

class ConsumerGroupHeartbeatResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "member_id", "member_epoch", "heartbeat_interval_ms", "assignment", "has_assignment")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    HAS_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    has_assignment: bool
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ..., assignment: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., has_assignment: _Optional[bool] = ...) -> None: ...

class OffsetCommitPartition(_message.Message):
    __slots__ = ("partition", "committed_offset", "committed_leader_epoch", "committed_metadata")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_METADATA_FIELD_NUMBER: _ClassVar[int]
    partition: int
    committed_offset: int
    committed_leader_epoch: int
    committed_metadata: str
    def __init__(self, partition: _Optional[int] = ..., committed_offset: _Optional[int] = ..., committed_leader_epoch: _Optional[int] = ..., committed_metadata: _Optional[str] = ...) -> None: ...

class OffsetCommitTopic(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[OffsetCommitPartition]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetCommitPartition, _Mapping]]] = ...) -> None: ...

class OffsetCommitRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "member_epoch", "topics", "group_instance_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    member_epoch: int
    topics: _containers.RepeatedCompositeFieldContainer[OffsetCommitTopic]
    group_instance_id: str
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[OffsetCommitTopic, _Mapping]]] = ..., group_instance_id: _Optional[str] = ...) -> None: ...

class PartitionError(_message.Message):
    __slots__ = ("partition", "error_code")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    partition: int
    error_code: int
    def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[int] = ...) -> None: ...

class TopicErrors(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionError]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionError, _Mapping]]] = ...) -> None: ...

class OffsetCommitResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "topics")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    topics: _containers.RepeatedCompositeFieldContainer[TopicErrors]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[TopicErrors, _Mapping]]] = ...) -> None: ...

class OffsetCommitBatch(_message.Message):
    __slots__ = ("commits",)
    COMMITS_FIELD_NUMBER: _ClassVar[int]
    commits: _containers.RepeatedCompositeFieldContainer[OffsetCommitRequest]
    def __init__(self, commits: _Optional[_Iterable[_Union[OffsetCommitRequest, _Mapping]]] = ...) -> None: ...

class OffsetCommitBatchResponse(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[OffsetCommitResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[OffsetCommitResponse, _Mapping]]] = ...) -> None: ...

class OffsetFetchRequest(_message.Message):
    __slots__ = ("group_id", "partitions", "require_stable")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_STABLE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    require_stable: bool
    def __init__(self, group_id: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., require_stable: _Optional[bool] = ...) -> None: ...

class OffsetFetchPartition(_message.Message):
    __slots__ = ("partition", "committed_offset", "committed_leader_epoch", "metadata", "commit_timestamp", "error_code")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    partition: int
    committed_offset: int
    committed_leader_epoch: int
    metadata: str
    commit_timestamp: int
    error_code: int
    def __init__(self, partition: _Optional[int] = ..., committed_offset: _Optional[int] = ..., committed_leader_epoch: _Optional[int] = ..., metadata: _Optional[str] = ..., commit_timestamp: _Optional[int] = ..., error_code: _Optional[int] = ...) -> None: ...

class OffsetFetchTopic(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[OffsetFetchPartition]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetFetchPartition, _Mapping]]] = ...) -> None: ...

class OffsetFetchResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "topics")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetFetchTopic]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetFetchTopic, _Mapping]]] = ...) -> None: ...

class OffsetDeleteRequest(_message.Message):
    __slots__ = ("group_id", "partitions")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    def __init__(self, group_id: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ...) -> None: ...

class OffsetDeleteResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "topics")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    topics: _containers.RepeatedCompositeFieldContainer[TopicErrors]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[TopicErrors, _Mapping]]] = ...) -> None: ...

class DescribeGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class GroupMember(_message.Message):
    __slots__ = ("member_id", "instance_id", "client_id", "client_host", "member_epoch", "state", "assignment", "target_assignment", "subscribed_topic_names", "subscribed_topic_regex", "member_metadata", "member_assignment")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    TARGET_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_TOPIC_NAMES_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_TOPIC_REGEX_FIELD_NUMBER: _ClassVar[int]
    MEMBER_METADATA_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    instance_id: str
    client_id: str
    client_host: str
    member_epoch: int
    state: str
    assignment: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    target_assignment: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    subscribed_topic_names: _containers.RepeatedScalarFieldContainer[str]
    subscribed_topic_regex: str
    member_metadata: bytes
    member_assignment: bytes
    def __init__(self, member_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., member_epoch: _Optional[int] = ..., state: _Optional[str] = ..., assignment: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., target_assignment: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., subscribed_topic_names: _Optional[_Iterable[str]] = ..., subscribed_topic_regex: _Optional[str] = ..., member_metadata: _Optional[bytes] = ..., member_assignment: _Optional[bytes] = ...) -> None: ...

class DescribedGroup(_message.Message):
    __slots__ = ("group_id", "error_code", "error_message", "state", "group_epoch", "assignment_epoch", "assignor", "members", "coordinator_partition", "protocol_type", "group_type")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_PARTITION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    GROUP_TYPE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    error_code: int
    error_message: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: _containers.RepeatedCompositeFieldContainer[GroupMember]
    coordinator_partition: int
    protocol_type: str
    group_type: str
    def __init__(self, group_id: _Optional[str] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., state: _Optional[str] = ..., group_epoch: _Optional[int] = ..., assignment_epoch: _Optional[int] = ..., assignor: _Optional[str] = ..., members: _Optional[_Iterable[_Union[GroupMember, _Mapping]]] = ..., coordinator_partition: _Optional[int] = ..., protocol_type: _Optional[str] = ..., group_type: _Optional[str] = ...) -> None: ...

class DescribeGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[DescribedGroup]
    def __init__(self, groups: _Optional[_Iterable[_Union[DescribedGroup, _Mapping]]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListedGroup(_message.Message):
    __slots__ = ("group_id", "state", "members", "protocol_type", "group_type")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    GROUP_TYPE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    state: str
    members: int
    protocol_type: str
    group_type: str
    def __init__(self, group_id: _Optional[str] = ..., state: _Optional[str] = ..., members: _Optional[int] = ..., protocol_type: _Optional[str] = ..., group_type: _Optional[str] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("error_code", "groups")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    groups: _containers.RepeatedCompositeFieldContainer[ListedGroup]
    def __init__(self, error_code: _Optional[int] = ..., groups: _Optional[_Iterable[_Union[ListedGroup, _Mapping]]] = ...) -> None: ...

class DeleteGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteGroupsResult(_message.Message):
    __slots__ = ("group_id", "error_code", "error_message")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    error_code: int
    error_message: str
    def __init__(self, group_id: _Optional[str] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class DeleteGroupsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DeleteGroupsResult]
    def __init__(self, results: _Optional[_Iterable[_Union[DeleteGroupsResult, _Mapping]]] = ...) -> None: ...

class JoinGroupProtocol(_message.Message):
    __slots__ = ("name", "metadata")
    NAME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    metadata: bytes
    def __init__(self, name: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class JoinGroupRequest(_message.Message):
    __slots__ = ("group_id", "session_timeout_ms", "rebalance_timeout_ms", "member_id", "group_instance_id", "protocol_type", "protocols", "reason", "client_id", "client_host", "api_version")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOLS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str
    protocol_type: str
    protocols: _containers.RepeatedCompositeFieldContainer[JoinGroupProtocol]
    reason: str
    client_id: str
    client_host: str
    api_version: int
    def __init__(self, group_id: _Optional[str] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocols: _Optional[_Iterable[_Union[JoinGroupProtocol, _Mapping]]] = ..., reason: _Optional[str] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., api_version: _Optional[int] = ...) -> None: ...

class JoinGroupMember(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "metadata")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    metadata: bytes
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class JoinGroupResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "generation_id", "protocol_type", "protocol_name", "leader", "skip_assignment", "member_id", "members")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    SKIP_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    generation_id: int
    protocol_type: str
    protocol_name: str
    leader: str
    skip_assignment: bool
    member_id: str
    members: _containers.RepeatedCompositeFieldContainer[JoinGroupMember]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., generation_id: _Optional[int] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., leader: _Optional[str] = ..., skip_assignment: _Optional[bool] = ..., member_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[JoinGroupMember, _Mapping]]] = ...) -> None: ...

class SyncGroupAssignment(_message.Message):
    __slots__ = ("member_id", "assignment")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    assignment: bytes
    def __init__(self, member_id: _Optional[str] = ..., assignment: _Optional[bytes] = ...) -> None: ...

class SyncGroupRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id", "protocol_type", "protocol_name", "assignments")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    protocol_type: str
    protocol_name: str
    assignments: _containers.RepeatedCompositeFieldContainer[SyncGroupAssignment]
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., assignments: _Optional[_Iterable[_Union[SyncGroupAssignment, _Mapping]]] = ...) -> None: ...

class SyncGroupResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "protocol_type", "protocol_name", "assignment")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    protocol_type: str
    protocol_name: str
    assignment: bytes
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., assignment: _Optional[bytes] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class LeaveGroupMember(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "reason")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    reason: str
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class LeaveGroupRequest(_message.Message):
    __slots__ = ("group_id", "members")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    members: _containers.RepeatedCompositeFieldContainer[LeaveGroupMember]
    def __init__(self, group_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[LeaveGroupMember, _Mapping]]] = ...) -> None: ...

class LeaveGroupMemberResponse(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "error_code")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    error_code: int
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., error_code: _Optional[int] = ...) -> None: ...

class LeaveGroupResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "members")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    members: _containers.RepeatedCompositeFieldContainer[LeaveGroupMemberResponse]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., members: _Optional[_Iterable[_Union[LeaveGroupMemberResponse, _Mapping]]] = ...) -> None: ...

class TxnOffsetCommitRequest(_message.Message):
    __slots__ = ("transactional_id", "group_id", "producer_id", "producer_epoch", "generation_id", "member_id", "group_instance_id", "topics")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int
    member_id: str
    group_instance_id: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetCommitTopic]
    def __init__(self, transactional_id: _Optional[str] = ..., group_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetCommitTopic, _Mapping]]] = ...) -> None: ...

class TxnOffsetCommitResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "topics")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    topics: _containers.RepeatedCompositeFieldContainer[TopicErrors]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[TopicErrors, _Mapping]]] = ...) -> None: ...

class CompleteTxnOffsetsRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "committed", "transaction_version", "group_id", "offsets_partition")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_VERSION_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_PARTITION_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    transaction_version: int
    group_id: str
    offsets_partition: int
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., committed: _Optional[bool] = ..., transaction_version: _Optional[int] = ..., group_id: _Optional[str] = ..., offsets_partition: _Optional[int] = ...) -> None: ...

class CompleteTxnOffsetsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "completed")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    completed: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., completed: _Optional[int] = ...) -> None: ...
