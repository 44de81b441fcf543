"""The in-memory backend's primitives of a conversation's life: summaries, erasure, retention.

They keep the memory store's rules: a write holds its lock and replaces rows instead of
changing them (a transaction's snapshot may share them); reads see what was committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from threadstore.errors import NotFoundError
from threadstore.models import (
    ErasureReceipt,
    ExpiredChat,
    RetentionPolicy,
    ScopedPolicy,
    Summary,
)
from threadstore.store._lifecycle import (
    GLOBAL_SCOPE,
    LifecycleBackend,
    Scope,
)

if TYPE_CHECKING:
    from threadstore.store.memory import MemoryStore

__all__ = ["MemoryLifecycle"]


class MemoryLifecycle(LifecycleBackend):
    """Summaries, erasure and retention of one :class:`~threadstore.store.memory.MemoryStore`."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    async def insert_summary(self, summary: Summary) -> None:
        async with self.store._lock.hold():
            if self.store._state.live_chat(summary.chat_uuid) is None:
                raise NotFoundError(f"chat {summary.chat_uuid} does not exist")
            self.store._state.summaries[summary.summary_uuid] = summary.model_copy(deep=True)

    async def select_summaries(self, chat_uuid: UUID) -> list[Summary]:
        state = self.store._state
        if state.live_chat(chat_uuid) is None:
            return []
        found = [s for s in state.summaries.values() if s.chat_uuid == chat_uuid]
        # Newest first; the dict keeps insertion order, which breaks equal times.
        ordered = sorted(enumerate(found), key=lambda p: (p[1].created_at, p[0]), reverse=True)
        return [summary.model_copy(deep=True) for _, summary in ordered]

    async def delete_summary(self, chat_uuid: UUID, summary_uuid: UUID) -> bool:
        async with self.store._lock.hold():
            found = self.store._state.summaries.get(summary_uuid)
            if found is None or found.chat_uuid != chat_uuid:
                return False
            del self.store._state.summaries[summary_uuid]
            return True

    async def tombstone(self, user_uuid: UUID, at: datetime) -> None:
        async with self.store._lock.hold():
            self.store._state.erased.setdefault(user_uuid, at)

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
        async with self.store._lock.hold():
            self.store._state.receipts[receipt.receipt_uuid] = receipt.model_copy(deep=True)

    async def select_receipts(self, user_uuid: UUID | None) -> list[ErasureReceipt]:
        found = [
            r.model_copy(deep=True)
            for r in self.store._state.receipts.values()
            if user_uuid is None or r.user_uuid == user_uuid
        ]
        return sorted(found, key=lambda r: r.started_at, reverse=True)

    async def upsert_policy(
        self, scope: Scope, scope_uuid: UUID, policy: RetentionPolicy, at: datetime
    ) -> None:
        async with self.store._lock.hold():
            self.store._state.policies[(scope, scope_uuid)] = policy.model_copy()

    async def delete_policy(self, scope: Scope, scope_uuid: UUID) -> bool:
        async with self.store._lock.hold():
            return self.store._state.policies.pop((scope, scope_uuid), None) is not None

    async def select_policies(self) -> list[ScopedPolicy]:
        found = sorted(self.store._state.policies.items(), key=lambda item: str(item[0]))
        return [
            ScopedPolicy(scope=scope, scope_uuid=uuid, policy=p.model_copy())
            for (scope, uuid), p in found
        ]

    def _reason(self, row: dict[str, Any], now: datetime, window: float) -> str | None:
        """Why the chat of ``row`` expired, or ``None`` (held, or not expired)."""
        policies = self.store._state.policies
        policy = RetentionPolicy()
        for key in (
            ("global", GLOBAL_SCOPE),
            ("user", row["user_uuid"]),
            ("chat", row["chat_uuid"]),
        ):
            if key in policies:
                policy = policies[key].over(policy)
        if policy.legal_hold:
            return None
        deleted = self.store._state.deleted.get(row["chat_uuid"])
        if deleted is not None:
            limit = policy.deleted_window if policy.deleted_window is not None else window
            return "deleted" if (now - deleted).total_seconds() > limit else None
        if policy.absolute_ttl is not None:
            if (now - row["created_at"]).total_seconds() > policy.absolute_ttl:
                return "absolute"
        if policy.idle_ttl is not None:
            if (now - row["updated_at"]).total_seconds() > policy.idle_ttl:
                return "idle"
        return None

    async def select_expired(
        self, now: datetime, window: float, after: UUID | None, limit: int
    ) -> list[ExpiredChat]:
        found: list[ExpiredChat] = []
        state = self.store._state
        for chat_uuid in sorted(state.chats, key=str):
            if after is not None and str(chat_uuid) <= str(after):
                continue
            row = state.chats[chat_uuid]
            reason = self._reason(row, now, window)
            if reason is not None:
                found.append(
                    ExpiredChat(chat_uuid=chat_uuid, user_uuid=row["user_uuid"], reason=reason)
                )
                if len(found) == limit:
                    break
        return found

    async def delete_expired(
        self, chats: Sequence[UUID], now: datetime, window: float
    ) -> tuple[list[UUID], int]:
        store = self.store
        async with store._lock.hold():
            state = store._state
            gone = [
                c
                for c in chats
                if c in state.chats and self._reason(state.chats[c], now, window) is not None
            ]
            owned = set(gone)
            messages = sum(m["chat_uuid"] in owned for m in state.messages.values())
            for chat_uuid in gone:
                store._drop_chat(chat_uuid)
        return gone, messages
