"""Deterministic identifiers: the same inputs must give the same keys forever.

The expected values are written out as literals (computed once from the documented
derivation) so that any change to a derivation fails here, not in a user's database.
"""

from __future__ import annotations

import hashlib
from uuid import UUID

import pytest

from threadstore import participant_id
from threadstore.keys import (
    DEDUPLICATION_KEY_LENGTH,
    chat_deduplication_key,
    normalize_participant_id,
    session_deduplication_key,
)

USER = UUID("12345678-1234-5678-1234-567812345678")
USER_PARTICIPANT = "ddcbc45ed5383449004fe644"


def test_deduplication_keys_are_64_characters() -> None:
    assert DEDUPLICATION_KEY_LENGTH == 64
    assert len(chat_deduplication_key(USER, "t")) == DEDUPLICATION_KEY_LENGTH
    assert len(session_deduplication_key("ns")) == DEDUPLICATION_KEY_LENGTH


def test_chat_deduplication_key_is_sha256_of_chat_user_and_thread() -> None:
    key = chat_deduplication_key(USER, "thread-1")

    assert key == "685d228f3faaa32ea410a8c3e7f6618f4ed4e31df8f2611b921b7b5a998350ca"
    derived = hashlib.sha256(b"chat\x0012345678-1234-5678-1234-567812345678\x00thread-1")
    assert key == derived.hexdigest()[:DEDUPLICATION_KEY_LENGTH]


def test_chat_deduplication_key_hashes_non_ascii_thread_ids_as_utf8() -> None:
    assert (
        chat_deduplication_key(USER, "スレッド/ü")
        == "a4fbb22b97de867feef794e66872212bb07d9dd476c5b36db4431d4ca561df69"
    )


def test_chat_deduplication_key_differs_per_user_and_per_thread() -> None:
    other_user = UUID("87654321-4321-8765-4321-876543218765")
    keys = {
        chat_deduplication_key(USER, "a"),
        chat_deduplication_key(USER, "b"),
        chat_deduplication_key(other_user, "a"),
    }
    assert len(keys) == 3


def test_session_deduplication_key_joins_namespace_and_parts_with_nul() -> None:
    key = session_deduplication_key("agent", "a", "b")

    assert key == "137afce2de3cb533717917f667ed7a4c92ad4bf6a9b89db76dc5131eea8424e0"
    assert key == hashlib.sha256(b"agent\x00a\x00b").hexdigest()
    assert session_deduplication_key("agent") == (
        "d4f0bc5a29de06b510f9aa428f1eedba926012b591fef7a518e776a7c9bd1824"
    )


def test_session_deduplication_key_is_lowercase_hex() -> None:
    key = session_deduplication_key("agent", "A", "B")
    assert key == key.lower()
    int(key, 16)


def test_session_deduplication_key_separates_parts_unambiguously() -> None:
    assert session_deduplication_key("ns", "ab") != session_deduplication_key("ns", "a", "b")
    assert session_deduplication_key("ns", "a", "b") != session_deduplication_key("ns", "b", "a")
    assert session_deduplication_key("chat", str(USER), "t") == chat_deduplication_key(USER, "t")


def test_participant_id_hashes_the_user_uuids_raw_bytes_as_the_published_layer_does() -> None:
    derived = participant_id(USER)

    assert derived == USER_PARTICIPANT
    assert derived == hashlib.sha256(USER.bytes).hexdigest()[:24]
    assert derived != hashlib.sha256(str(USER).encode()).hexdigest()[:24]  # not the text
    assert participant_id(USER, override=None) == USER_PARTICIPANT
    other = UUID("00000000-0000-4000-8000-000000000001")
    assert participant_id(other) == "86a427757a31f2dacd9e79ab"


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("0123456789abcdef01234567", "0123456789abcdef01234567"),
        ("0123456789ABCDEF01234567", "0123456789abcdef01234567"),
        ("  0123456789abcdef01234567\n", "0123456789abcdef01234567"),
    ],
)
def test_participant_id_uses_a_valid_override_normalized(override: str, expected: str) -> None:
    assert participant_id(USER, override=override) == expected


@pytest.mark.parametrize(
    "override",
    [
        "",
        "   ",
        "0123456789abcdef0123456",  # 23 characters
        "0123456789abcdef012345678",  # 25 characters
        "0123456789abcdef0123456g",  # not hex
        "01234567 89abcdef01234567",  # space inside
        "0x23456789abcdef01234567",
    ],
)
def test_participant_id_ignores_an_invalid_override(override: str) -> None:
    assert participant_id(USER, override=override) == USER_PARTICIPANT


def test_normalize_participant_id_lowercases_and_strips() -> None:
    assert normalize_participant_id("ABCDEF0123456789ABCDEF01") == "abcdef0123456789abcdef01"
    assert normalize_participant_id(" abcdef0123456789abcdef01 ") == "abcdef0123456789abcdef01"


@pytest.mark.parametrize("raw", [None, "", "xyz", "abcdef0123456789abcdef0", "g" * 24])
def test_normalize_participant_id_rejects_missing_or_malformed_ids(raw: str | None) -> None:
    assert normalize_participant_id(raw) is None
