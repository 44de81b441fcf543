"""Opaque keyset cursors: of chat listings, and of search hits."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from uuid import UUID

from threadstore.errors import InvalidInputError
from threadstore.models import Chat

__all__ = ["SearchCursor", "SearchOrder", "decode_chat_cursor", "encode_chat_cursor"]

SearchOrder = Literal["newest", "best"]
"""How search hits are ordered: newest first, or best match first."""


def _encode(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode(cursor: str) -> str:
    return base64.urlsafe_b64decode((cursor + "=" * (-len(cursor) % 4)).encode()).decode()


def encode_chat_cursor(chat: Chat) -> str:
    """Return the cursor that continues a newest-first listing after ``chat``."""
    return _encode(f"{chat.updated_at.isoformat()}|{chat.chat_uuid}")


def decode_chat_cursor(cursor: str) -> tuple[datetime, str]:
    """Return (updated_at, chat_uuid) from a cursor made by :func:`encode_chat_cursor`."""
    try:
        at, chat_uuid = _decode(cursor).split("|")
        return datetime.fromisoformat(at), str(UUID(chat_uuid))
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"invalid cursor {cursor!r}") from exc


@dataclass(frozen=True, slots=True)
class SearchCursor:
    """Where the previous page ended: its last hit's score, time and ``Message.seq``."""

    order: SearchOrder
    score: float
    """The last hit's score in a search by best match (0 in one by newest)."""
    created_at: datetime
    seq: int

    def encode(self) -> str:
        return _encode(f"{self.order}|{self.score.hex()}|{self.created_at.isoformat()}|{self.seq}")

    @staticmethod
    def decode(cursor: str, order: SearchOrder) -> SearchCursor:
        """The cursor :meth:`encode` made for a search of the same ``order``."""
        try:
            made_for, score, at, seq = _decode(cursor).split("|")
            found = SearchCursor(order, float.fromhex(score), datetime.fromisoformat(at), int(seq))
        except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"invalid cursor {cursor!r}") from exc
        if made_for != order:
            raise InvalidInputError(f"cursor {cursor!r} belongs to a search by {made_for}")
        return found
