"""What a backend implements for a conversation's life: summaries, erasure, retention.

Each backend builds one :class:`LifecycleBackend` (``store._lifecycle``) over its own
connections; the store's groups (``store.branches`` for summaries, ``store.chats`` for
erasure and retention) hold the logic that is the same everywhere, on these primitives.
A backend without one (a custom store) answers those operations with
``ConfigurationError``.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from datetime import datetime
from typing import Literal
from uuid import UUID

from threadstore.models import ErasureReceipt, ExpiredChat, RetentionPolicy, ScopedPolicy, Summary

__all__ = [
    "ERASED_KINDS",
    "ERASED_USER",
    "ERASED_USER_DETAIL",
    "ERASED_USER_STATE",
    "GLOBAL_SCOPE",
    "SUMMARY_COLUMNS",
    "LifecycleBackend",
    "Scope",
]

SUMMARY_COLUMNS = (
    "summary_uuid",
    "chat_uuid",
    "first_message_uuid",
    "last_message_uuid",
    "last_seq",
    "message_count",
    "content",
    "summarizer",
    "metadata",
    "created_at",
)
"""The columns of ``summaries`` a backend writes and reads, in the order of its statements."""

Scope = Literal["global", "user", "chat"]
"""Whom a retention policy is for: every chat, a user's chats, or one chat."""

GLOBAL_SCOPE = UUID(int=0)
"""The ``scope_uuid`` of the global policy."""


ERASED_USER = "threadstore: this user was erased"
"""What the database says when a chat of an erased user is created (its tombstone)."""

ERASED_USER_STATE = "TS001"
"""PostgreSQL's error code for it."""

ERASED_USER_DETAIL = "this user was erased (forget_user): nothing of theirs can be stored again"
"""The ``ConflictError`` a write for an erased user gets."""

ERASED_KINDS = ("chats", "messages", "tool_calls", "reasonings", "runs", "summaries", "run_events")
"""The rows an erasure counts, per kind, in what it removes from the database."""


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

    # --- erasure ---------------------------------------------------------------------

    @abc.abstractmethod
    async def tombstone(self, user_uuid: UUID, at: datetime) -> None:
        """Refuse every chat of ``user_uuid`` created from now on (idempotent)."""

    @abc.abstractmethod
    async def erase_chats(self, user_uuid: UUID, limit: int) -> tuple[dict[str, int], list[UUID]]:
        """Delete up to ``limit`` chats of the user (live or soft-deleted) with every row they
        own, in one transaction; the rows removed per kind (:data:`ERASED_KINDS`), and the
        chats removed."""

    @abc.abstractmethod
    async def save_receipt(self, receipt: ErasureReceipt) -> None:
        """Keep an erasure's receipt."""

    @abc.abstractmethod
    async def select_receipts(self, user_uuid: UUID | None) -> list[ErasureReceipt]:
        """Receipts of erasures (of one user, or all), newest first."""

    # --- retention -------------------------------------------------------------------

    @abc.abstractmethod
    async def upsert_policy(
        self, scope: Scope, scope_uuid: UUID, policy: RetentionPolicy, at: datetime
    ) -> None:
        """Set the policy of a scope, replacing the one it had."""

    @abc.abstractmethod
    async def delete_policy(self, scope: Scope, scope_uuid: UUID) -> bool:
        """Remove the policy of a scope; whether it had one."""

    @abc.abstractmethod
    async def select_policies(self) -> list[ScopedPolicy]:
        """Every stored policy."""

    @abc.abstractmethod
    async def select_expired(
        self, now: datetime, window: float, after: UUID | None, limit: int
    ) -> list[ExpiredChat]:
        """Up to ``limit`` expired chats past ``after``, by chat uuid (no write is waited for).

        ``window``: seconds a soft-deleted chat stays restorable without a policy saying.
        """

    @abc.abstractmethod
    async def delete_expired(
        self, chats: Sequence[UUID], now: datetime, window: float
    ) -> tuple[list[UUID], int]:
        """Delete those of ``chats`` still expired, in one transaction; them and their messages."""

    async def prune_run_logs(self) -> int:
        """Delete the relayed events of runs beyond each chat's ``keep_run_logs``; how many.

        Only a backend that relays run events (PostgreSQL) has any.
        """
        return 0
