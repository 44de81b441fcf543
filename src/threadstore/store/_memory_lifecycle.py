"""The in-memory backend's primitives of a conversation's life: summaries, erasure, retention.

They keep the memory store's rules: a write holds its lock and replaces rows instead of
changing them (a transaction's snapshot may share them); reads see what was committed.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from threadstore.errors import NotFoundError
from threadstore.models import ErasureReceipt, Summary
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

    async def tombstone(self, user_uuid: UUID, at: datetime) -> None:
        store = self.store
        async with store._lock.hold():
            store._state.erased.setdefault(user_uuid, at)

    async def erase_chats(self, user_uuid: UUID, limit: int) -> tuple[dict[str, int], list[UUID]]:
        store = self.store
        async with store._lock.hold():
            state = store._state
            chats = sorted(
                (u for u, row in state.chats.items() if row["user_uuid"] == user_uuid), key=str
            )[:limit]
            owned = set(chats)
            messages = {u for u, m in state.messages.items() if m["chat_uuid"] in owned}
            counts = {
                "chats": len(chats),
                "messages": len(messages),
                "tool_calls": sum(t["message_uuid"] in messages for t in state.tool_calls.values()),
                "reasonings": sum(r["message_uuid"] in messages for r in state.reasonings.values()),
                "runs": sum(key[0] in owned for key in state.runs),
                "summaries": sum(s.chat_uuid in owned for s in state.summaries.values()),
                "run_events": 0,
            }
            for chat_uuid in chats:
                store._drop_chat(chat_uuid)
        return counts, chats

    async def save_receipt(self, receipt: ErasureReceipt) -> None:
        store = self.store
        async with store._lock.hold():
            store._state.receipts[receipt.receipt_uuid] = receipt.model_copy(deep=True)

    async def select_receipts(self, user_uuid: UUID | None) -> list[ErasureReceipt]:
        found = [
            r.model_copy(deep=True)
            for r in self.store._state.receipts.values()
            if user_uuid is None or r.user_uuid == user_uuid
        ]
        return sorted(found, key=lambda r: r.started_at, reverse=True)
