"""The seed's repository Protocols, and the capabilities a repository declares beyond them.

``ChatRepositoryLike`` and ``MessageRepositoryLike`` keep the seed's method names and
meanings, so any object with these methods is a drop-in for the storage agent; a
:class:`~threadstore.store.Store` implements them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable
from uuid import UUID

from threadstore import models

__all__ = [
    "Capabilities",
    "ChatRepositoryLike",
    "MessageRepositoryLike",
    "RunRepositoryLike",
    "capabilities_of",
]


@runtime_checkable
class ChatRepositoryLike(Protocol):
    """Structural interface for chat persistence (the seed's names and meanings)."""

    async def create_chat(self, chat_data: models.ChatCreate) -> models.Chat:
        """Create a chat, idempotent by (user, thread): a repeat returns the existing one."""

    async def get_chat_by_thread_id(self, user_uuid: UUID, thread_id: str) -> models.Chat | None:
        """Return the chat for a (user, thread_id) pair, or ``None``."""

    async def get_all_chats(self, user_uuid: UUID | None = None) -> Sequence[models.Chat]:
        """Return every chat, optionally one user's (unbounded: page with ``list_chats``)."""

    async def update_chat_name(self, chat_uuid: UUID, name: str) -> models.Chat | None:
        """Rename a chat; ``None`` when it is unknown."""

    async def delete_chat(self, chat_uuid: UUID) -> models.Chat | None:
        """Delete a chat and every row it owns; return it, or ``None`` when unknown."""


@runtime_checkable
class MessageRepositoryLike(Protocol):
    """Structural interface for message persistence (the seed's names and meanings)."""

    def transaction(self) -> AbstractAsyncContextManager[None]:
        """Return an async context manager that groups the writes inside it atomically."""

    async def create_message(self, message_data: models.MessageCreate) -> models.Message:
        """Persist a new message and return it."""

    async def update_message(
        self, message_uuid: UUID, update: models.MessageUpdate
    ) -> models.Message | None:
        """Patch a message's own fields; ``None`` when it is unknown."""

    async def create_message_tool_call(self, data: models.MessageToolCallCreate) -> models.ToolCall:
        """Append a tool call to its parent message."""

    async def update_message_tool_call(
        self, uuid: UUID, update: models.MessageToolCallUpdate
    ) -> models.ToolCall | None:
        """Patch a tool call; ``None`` when it is unknown."""

    async def create_message_reasoning(
        self, data: models.MessageReasoningCreate
    ) -> models.Reasoning:
        """Append a reasoning step to its parent message."""

    async def update_message_reasoning(
        self, uuid: UUID, update: models.MessageReasoningUpdate
    ) -> models.Reasoning | None:
        """Patch a reasoning step; ``None`` when it is unknown."""

    async def get_message(self, message_uuid: UUID) -> models.Message | None:
        """Return a message by its uuid, or ``None``."""

    async def get_message_by_agui_id(self, chat_uuid: UUID, agui_id: str) -> models.Message | None:
        """Return a message by its AG-UI id within a chat, or ``None``."""

    async def get_tool_call_by_agui_id(
        self, message_uuid: UUID, tool_call_id: str
    ) -> models.ToolCall | None:
        """Return a tool call by its AG-UI id within a message, or ``None``."""

    async def get_chat_messages(self, chat_uuid: UUID) -> Sequence[models.Message]:
        """Return the chat's history (its active branch), oldest first."""

    async def get_last_messages(self, chat_uuids: list[UUID]) -> dict[UUID, models.Message]:
        """Map each given chat that has messages to its latest message."""


@runtime_checkable
class RunRepositoryLike(Protocol):
    """Structural interface for the run registry (owner + heartbeat per run)."""

    async def start_run(self, run: models.Run) -> models.Run:
        """Record a run as running (idempotent by (chat, run_id))."""

    async def heartbeat_runs(self, owner: str, run_ids: Sequence[tuple[UUID, str]]) -> None:
        """Refresh the heartbeat of the owner's live runs."""

    async def finish_run(
        self, chat_uuid: UUID, run_id: str, status: models.RunStatus, error: str | None = None
    ) -> models.Run | None:
        """Mark a run finished with a terminal status."""

    async def get_run(self, chat_uuid: UUID, run_id: str) -> models.Run | None:
        """Return one run, or ``None``."""

    async def get_stale_runs(self, older_than: datetime) -> Sequence[models.Run]:
        """Return running runs whose heartbeat is older than ``older_than``."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a repository offers beyond the seed's Protocols, declared once per class.

    The storage agent reads it through :func:`capabilities_of`; a Protocol-only
    repository declares nothing and gets the seed's calls only.
    """

    batch_writes: bool = False
    """``apply_writes``: a flush is one call (and a backend may send it in one round trip)."""
    chat_state: bool = False
    """``update_chat_state``: the chat's AG-UI state is stored."""
    run_records: bool = False
    """``finalize_run_records``: a run's leftover in-progress records are finalized at its end."""
    one_running_run: bool = False
    """``start_run`` raises ``RunLiveError`` for a second running run of a chat."""


def capabilities_of(repo: object) -> Capabilities:
    """The capabilities ``repo`` declares (none for a Protocol-only repository)."""
    declared = getattr(repo, "capabilities", None)
    return declared if isinstance(declared, Capabilities) else Capabilities()
