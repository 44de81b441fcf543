"""The in-memory backend's primitives of a conversation's life: summaries, erasure, retention.

They keep the memory store's rules: a write holds its lock and replaces rows instead of
changing them (a transaction's snapshot may share them); reads see what was committed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

from threadstore.errors import NotFoundError
from threadstore.models import Summary
from threadstore.store._lifecycle import LifecycleBackend

if TYPE_CHECKING:
    from threadstore.store.memory import MemoryStore

__all__ = ["MemoryLifecycle"]


class MemoryLifecycle(LifecycleBackend):
    """Summaries, erasure and retention of one :class:`~threadstore.store.memory.MemoryStore`."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    async def insert_summary(self, summary: Summary) -> None:
        store = self.store
        async with store._lock.hold():
            if store._state.live_chat(summary.chat_uuid) is None:
                raise NotFoundError(f"chat {summary.chat_uuid} does not exist")
            store._state.summaries[summary.summary_uuid] = summary.model_copy(deep=True)

    async def select_summaries(self, chat_uuid: UUID) -> list[Summary]:
        state = self.store._state
        if state.live_chat(chat_uuid) is None:
            return []
        found = [s for s in state.summaries.values() if s.chat_uuid == chat_uuid]
        # Newest first; the dict keeps insertion order, which breaks equal times.
        ordered = sorted(enumerate(found), key=lambda p: (p[1].created_at, p[0]), reverse=True)
        return [summary.model_copy(deep=True) for _, summary in ordered]

    async def delete_summary(self, chat_uuid: UUID, summary_uuid: UUID) -> bool:
        store = self.store
        async with store._lock.hold():
            found = store._state.summaries.get(summary_uuid)
            if found is None or found.chat_uuid != chat_uuid:
                return False
            del store._state.summaries[summary_uuid]
            return True
