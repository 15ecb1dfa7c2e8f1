from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Usage(_message.Message):
    __slots__ = ("quota_type", "user", "client_id", "amount")
    QUOTA_TYPE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    quota_type: int
    user: str
    client_id: str
    amount: float
    def __init__(self, quota_type: _Optional[int] = ..., user: _Optional[str] = ..., client_id: _Optional[str] = ..., amount: _Optional[float] = ...) -> None: ...

class UsageReport(_message.Message):
    __slots__ = ("broker_id", "usage", "sequence")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    usage: _containers.RepeatedCompositeFieldContainer[Usage]
    sequence: int
    def __init__(self, broker_id: _Optional[int] = ..., usage: _Optional[_Iterable[_Union[Usage, _Mapping]]] = ..., sequence: _Optional[int] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("quota_type", "user", "client_id", "throttle_time_ms", "credit", "quota", "rate")
    QUOTA_TYPE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    quota_type: int
    user: str
    client_id: str
    throttle_time_ms: int
    credit: float
    quota: float
    rate: float
    def __init__(self, quota_type: _Optional[int] = ..., user: _Optional[str] = ..., client_id: _Optional[str] = ..., throttle_time_ms: _Optional[int] = ..., credit: _Optional[float] = ..., quota: _Optional[float] = ..., rate: _Optional[float] = ...) -> None: ...

class ThrottleDecisions(_message.Message):
    __slots__ = ("decisions", "sequence", "instance")
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    decisions: _containers.RepeatedCompositeFieldContainer[Decision]
    sequence: int
    instance: str
    def __init__(self, decisions: _Optional[_Iterable[_Union[Decision, _Mapping]]] = ..., sequence: _Optional[int] = ..., instance: _Optional[str] = ...) -> None: ...

class DescribeUsageRequest(_message.Message):
    __slots__ = ("client_id",)
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    def __init__(self, client_id: _Optional[str] = ...) -> None: ...

class UsageTotal(_message.Message):
    __slots__ = ("quota_type", "user", "client_id", "broker_id", "total", "throttle_time_ms", "quota", "rate")
    QUOTA_TYPE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    quota_type: int
    user: str
    client_id: str
    broker_id: int
    total: float
    throttle_time_ms: int
    quota: float
    rate: float
    def __init__(self, quota_type: _Optional[int] = ..., user: _Optional[str] = ..., client_id: _Optional[str] = ..., broker_id: _Optional[int] = ..., total: _Optional[float] = ..., throttle_time_ms: _Optional[int] = ..., quota: _Optional[float] = ..., rate: _Optional[float] = ...) -> None: ...

class DescribeUsageResponse(_message.Message):
    __slots__ = ("totals", "active", "instance")
    TOTALS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    totals: _containers.RepeatedCompositeFieldContainer[UsageTotal]
    active: bool
    instance: str
    def __init__(self, totals: _Optional[_Iterable[_Union[UsageTotal, _Mapping]]] = ..., active: _Optional[bool] = ..., instance: _Optional[str] = ...) -> None: ...
