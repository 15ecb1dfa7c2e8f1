from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class SaslAuthenticateRequest(_message.Message):
    __slots__ = ("mechanism", "auth_bytes", "handshake_id", "client_id")
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    AUTH_BYTES_FIELD_NUMBER: _ClassVar[int]
    HANDSHAKE_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    mechanism: str
    auth_bytes: bytes
    handshake_id: str
    client_id: str
    def __init__(self, mechanism: _Optional[str] = ..., auth_bytes: _Optional[bytes] = ..., handshake_id: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class SaslAuthenticateResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "auth_bytes", "handshake_id", "session_token", "session_lifetime_ms", "enabled_mechanisms")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    AUTH_BYTES_FIELD_NUMBER: _ClassVar[int]
    HANDSHAKE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_LIFETIME_MS_FIELD_NUMBER: _ClassVar[int]
    ENABLED_MECHANISMS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    auth_bytes: bytes
    handshake_id: str
    session_token: str
    session_lifetime_ms: int
    enabled_mechanisms: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., auth_bytes: _Optional[bytes] = ..., handshake_id: _Optional[str] = ..., session_token: _Optional[str] = ..., session_lifetime_ms: _Optional[int] = ..., enabled_mechanisms: _Optional[_Iterable[str]] = ...) -> None: ...
