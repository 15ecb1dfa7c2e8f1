"""SASL/PLAIN: parsing as Kafka's PlainSaslServer, and the password checked against a SCRAM credential."""

from __future__ import annotations

import pytest

from shared.security.plain import parse_plain
from shared.security.scram import (
    MAX_MESSAGE_BYTES,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    SaslAuthenticationError,
    create_credential,
    verify_password,
)


def test_plain_parse_and_verify_against_scram_credential() -> None:
    creds = parse_plain(b"\0alice\0s3cret")
    assert (creds.authzid, creds.username, creds.password) == ("", "alice", "s3cret")
    assert parse_plain(b"alice\0alice\0pw").authzid == "alice"
    for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
        cred = create_credential("s3cret", mech)
        assert verify_password(creds.password, cred, mech)
        assert not verify_password("S3cret", cred, mech)


@pytest.mark.parametrize("message", [b"alice\0pw", b"\0alice\0pw\0x", b"\0\0pw", b"\0alice\0", b"bob\0alice\0pw",
                                     b"\0\xff\0pw", b"\0a\0" + b"p" * MAX_MESSAGE_BYTES])
def test_plain_malformed(message: bytes) -> None:
    with pytest.raises(SaslAuthenticationError):
        parse_plain(message)
