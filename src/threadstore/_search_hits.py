"""What a search answers: its hits and their pages (re-exported by ``threadstore.models``)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SearchHit", "SearchPage"]


class _Hits(BaseModel):
    """The models' configuration (``threadstore.models``): unknown keys ignored on read."""

    model_config = ConfigDict(extra="ignore")


class SearchHit(_Hits):
    """A message that matched a search: where it is, what matched, and a snippet of it."""

    chat_uuid: UUID
    thread_id: str
    chat_name: str | None = None
    message_uuid: UUID
    role: str
    kind: Literal["text", "tool", "reasoning"]
    """What matched: the message's text, one of its tool calls (name, arguments, result),
    or its reasoning."""
    snippet: str
    """A short excerpt of what matched, around the matching words."""
    highlights: list[tuple[int, int]] = Field(default_factory=list)
    """``(start, end)`` character offsets in ``snippet`` of each matching word."""
    score: float | None = None
    """How well it matched (higher is better), in a search by best match (``None`` in one
    by newest); comparable within one search only."""
    created_at: datetime


class SearchPage(_Hits):
    """One page of search hits; pass ``next_cursor`` back (same query) for the next page."""

    items: list[SearchHit]
    next_cursor: str | None = None
