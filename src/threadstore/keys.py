"""Deterministic identifiers: deduplication keys, participant ids and user UUIDs.

These keep the seed's names and meanings, so an app that switches to threadstore
derives the same keys for the same inputs. So do two small helpers of the seed layer:
who emitted a message (:func:`emitter_for_role`) and the empty-text placeholder its
wire format needed (:func:`wire_non_empty_str` / :func:`app_str`).
"""

from __future__ import annotations

import hashlib
import re
from typing import Literal
from uuid import UUID, uuid5

__all__ = [
    "DEDUPLICATION_KEY_LENGTH",
    "EMPTY_TEXT_PLACEHOLDER",
    "PARTICIPANT_ID_LENGTH",
    "USER_NAMESPACE",
    "app_str",
    "chat_deduplication_key",
    "emitter_for_role",
    "normalize_participant_id",
    "participant_id",
    "session_deduplication_key",
    "user_uuid_for",
    "wire_non_empty_str",
]

DEDUPLICATION_KEY_LENGTH: int = 64
"""Length of every deduplication key (a truncated lowercase hex SHA-256)."""

PARTICIPANT_ID_LENGTH: int = 24
"""Length of a participant id (ObjectId-shaped: 24 lowercase hex characters)."""

USER_NAMESPACE = UUID("6f1c3a52-8a0e-5c5e-9d1f-7b2f0c4e6a11")
"""The uuid5 namespace that turns a non-UUID user id into a user UUID."""

EMPTY_TEXT_PLACEHOLDER = "\u200b"
"""The zero-width space the seed layer wrote for an empty text (its service refused "")."""

_PARTICIPANT_RE = re.compile(r"^[0-9a-f]{24}$")


def user_uuid_for(user_id: str) -> UUID:
    """Return the user UUID for ``user_id``: itself when it is a UUID, else its uuid5."""
    try:
        return UUID(user_id)
    except ValueError:
        return uuid5(USER_NAMESPACE, user_id)


def session_deduplication_key(namespace: str, *parts: str) -> str:
    """Return the key of (namespace, *parts): hex SHA-256 of the NUL-joined parts, 64 chars."""
    joined = "\0".join((namespace, *parts))
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()[:DEDUPLICATION_KEY_LENGTH]


def chat_deduplication_key(user_uuid: UUID, thread_id: str) -> str:
    """Return the deduplication key of a chat: ``sha256("chat\\0<user_uuid>\\0<thread_id>")``."""
    return session_deduplication_key("chat", str(user_uuid), thread_id)


def normalize_participant_id(raw: str | None) -> str | None:
    """Normalize a participant id to 24 lowercase hex chars; ``None`` when it is not one."""
    if raw is None:
        return None
    candidate = raw.strip().lower()
    return candidate if _PARTICIPANT_RE.match(candidate) else None


def participant_id(user_uuid: UUID, *, override: str | None = None) -> str:
    """Return a stable 24-hex participant id: a valid ``override``, else one derived from user.

    The derived id is the first 24 hex digits of the SHA-256 of the UUID's 16 raw
    bytes, as the published layer computes it, so the same user gets the same id.
    """
    normalized = normalize_participant_id(override)
    if normalized is not None:
        return normalized
    return hashlib.sha256(user_uuid.bytes).hexdigest()[:PARTICIPANT_ID_LENGTH]


def emitter_for_role(
    role: str, user_participant_id: str | None
) -> tuple[Literal["user", "agent"], str | None]:
    """Return who emitted a ``role`` message: ``("user", id)`` for a user, else ``("agent", None)``.

    A chat has one participant, its user (:attr:`threadstore.models.Chat.participants`);
    the agent is not one, so only user messages carry a participant id.
    """
    if role == "user":
        return "user", user_participant_id
    return "agent", None


def wire_non_empty_str(value: str | None) -> str:
    """Return ``value``, or :data:`EMPTY_TEXT_PLACEHOLDER` when it is empty or ``None``.

    threadstore stores an empty text as it is; this encodes one as the seed layer's wire
    format did, for code that still writes that format.
    """
    return value or EMPTY_TEXT_PLACEHOLDER


def app_str(value: str | None) -> str:
    """Decode :func:`wire_non_empty_str`: the placeholder (or ``None``) reads as ``""``."""
    return "" if not value or value == EMPTY_TEXT_PLACEHOLDER else value
