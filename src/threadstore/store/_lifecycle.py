"""What a backend implements for a conversation's life: summaries, erasure, retention.

Each backend builds one :class:`LifecycleBackend` (``store._lifecycle``) over its own
connections; the store's groups (``store.branches`` for summaries, ``store.chats`` for
erasure and retention) hold the logic that is the same everywhere, on these primitives.
A backend without one (a custom store) answers those operations with
``ConfigurationError``.
"""

from __future__ import annotations

import abc
from uuid import UUID

from threadstore.models import Summary

__all__ = ["LifecycleBackend"]


class LifecycleBackend(abc.ABC):
    """The primitives of summaries, erasure and retention of one backend."""

    # --- summaries ----------------------------------------------------------------------

    @abc.abstractmethod
    async def insert_summary(self, summary: Summary) -> None:
        """Store ``summary``; ``NotFoundError`` when its chat does not exist (or is deleted)."""

    @abc.abstractmethod
    async def select_summaries(self, chat_uuid: UUID) -> list[Summary]:
        """The chat's summaries, newest first (none for an unknown or deleted chat)."""

    @abc.abstractmethod
    async def delete_summary(self, chat_uuid: UUID, summary_uuid: UUID) -> bool:
        """Remove one summary of the chat; whether there was one."""
