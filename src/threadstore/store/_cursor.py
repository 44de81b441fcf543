"""Opaque keyset cursors for paginated chat listings."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from uuid import UUID

from threadstore.errors import InvalidInputError
from threadstore.models import Chat

__all__ = ["decode_chat_cursor", "encode_chat_cursor"]


def encode_chat_cursor(chat: Chat) -> str:
    """Return the cursor that continues a newest-first listing after ``chat``."""
    raw = f"{chat.updated_at.isoformat()}|{chat.chat_uuid}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_chat_cursor(cursor: str) -> tuple[datetime, str]:
    """Return (updated_at, chat_uuid) from a cursor made by :func:`encode_chat_cursor`."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        at, chat_uuid = base64.urlsafe_b64decode(padded.encode()).decode().split("|")
        return datetime.fromisoformat(at), str(UUID(chat_uuid))
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"invalid cursor {cursor!r}") from exc
