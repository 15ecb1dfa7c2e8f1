"""SASL/PLAIN (RFC 4616) message parsing; the password is checked against the stored SCRAM credential
with ``shared.security.scram.verify_password`` (only SCRAM credentials are stored: PLAIN derives
SaltedPassword with the stored salt and iterations and compares StoredKey, in constant time).

PLAIN sends the password itself, so it is only offered over TLS (SASL_SSL), as Kafka advises.
Pure. Must not import ``services`` or ``pipelines``.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.security.scram import MAX_MESSAGE_BYTES, SaslAuthenticationError


@dataclass(frozen=True)
class PlainCredentials:
    authzid: str
    username: str
    password: str


def parse_plain(message: bytes) -> PlainCredentials:
    """RFC 4616 ``[authzid] NUL authcid NUL passwd``. As Kafka's PlainSaslServer: exactly three fields,
    non-empty user and password, an authzid (if any) equal to the user."""
    if len(message) > MAX_MESSAGE_BYTES:
        raise SaslAuthenticationError(f"PLAIN message larger than {MAX_MESSAGE_BYTES} bytes")
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SaslAuthenticationError("PLAIN message is not UTF-8") from exc
    parts = text.split("\0")
    if len(parts) != 3:
        raise SaslAuthenticationError("PLAIN message must have three NUL-separated fields")
    authzid, username, password = parts
    if not username or not password:
        raise SaslAuthenticationError("PLAIN user name and password must not be empty")
    if authzid and authzid != username:
        raise SaslAuthenticationError("authorization id differs from the user name")
    return PlainCredentials(authzid, username, password)
