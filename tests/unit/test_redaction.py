"""Secrets never reach an event, a payload or a log line."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devs.domain.redaction import REDACTED, error_hash, excerpt, redact

SECRETS = [
    ("Authorization: Bearer abcdef0123456789xyz", "abcdef0123456789xyz"),
    ("curl -H 'Authorization: token ghp_abcdefghijklmnopqrstuvwxyz0123456789'", "ghp_"),
    ("export GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abc"),
    ("key AKIAIOSFODNN7EXAMPLE in use", "AKIAIOSFODNN7EXAMPLE"),
    ("OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234", "sk-proj-abcdefghijklmnop1234"),
    ("using sk-ant-api03-abcdefghijklmnopqrstu", "sk-ant-api03-abcdefghijklmnopqrstu"),
    ("password=hunter2 rest", "hunter2"),
    ('{"db_password": "s3cr3t!"}', "s3cr3t!"),
    ("DB_PASSWD: pa55word", "pa55word"),
    ("client_secret='zz-top-secret'", "zz-top-secret"),
    ("postgresql://admin:topsecret@db.internal:5432/app", "topsecret"),
    ("redis://:r3d1s@localhost:6379", "r3d1s"),
    ("slack xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmnop",
        "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
    ),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n"
        "-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEA",
    ),
    ("api_key: AIzaSyA-abcdefghijklmnopqrstuvwxyz01234", "AIzaSyA"),
]


@pytest.mark.parametrize(("text", "secret"), SECRETS)
def test_secret_is_redacted(text: str, secret: str) -> None:
    cleaned = redact(text)
    assert secret not in cleaned
    assert REDACTED in cleaned


def test_plain_text_is_untouched() -> None:
    text = "AssertionError: expected 3 == 4 in test_parser.py:12 (token count)"
    assert redact(text) == text


def test_connection_string_keeps_user_and_host() -> None:
    assert (
        redact("postgresql://admin:topsecret@db:5432/app")
        == f"postgresql://admin:{REDACTED}@db:5432/app"
    )


@given(st.text(max_size=200))
def test_redaction_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


def test_error_hash_is_sha256_hex() -> None:
    digest = error_hash("Traceback")
    assert digest == hashlib.sha256(b"Traceback").hexdigest()
    assert len(digest) == 64
    assert all(c in "0123456789abcdef" for c in digest)


def test_error_hash_survives_lone_surrogates() -> None:
    assert len(error_hash("bad \ud800 byte")) == 64


def test_excerpt_keeps_the_end() -> None:
    assert excerpt("abc", 10) == "abc"
    cut = excerpt("x" * 50 + "END", 10)
    assert len(cut) == 10
    assert cut.endswith("END")
    assert cut.startswith("…")
