"""What the store's reads are asked: page limits, chat filters, branch pages, keys.

Small frozen values the public methods build once and every backend's primitives read.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast
from uuid import UUID

from threadstore.errors import InvalidInputError
from threadstore.models import ChatCreate

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "BranchPage",
    "ChatFilter",
    "MessageKey",
    "RunFilter",
    "Siblings",
    "TreeNode",
    "check_limit",
    "require_chat_identity",
    "update_fields",
]


DEFAULT_PAGE_SIZE = 50
"""Page size of ``list_chats`` when no limit is given."""

MAX_PAGE_SIZE = 1000
"""Largest ``limit`` accepted by the paginated reads."""


def check_limit(limit: int | None, default: int | None = DEFAULT_PAGE_SIZE) -> int | None:
    """Validate a page-size argument against :data:`MAX_PAGE_SIZE`."""
    if limit is None:
        return default
    if limit < 1 or limit > MAX_PAGE_SIZE:
        raise InvalidInputError(f"limit must be between 1 and {MAX_PAGE_SIZE}, got {limit}")
    return limit


def require_chat_identity(chat_data: ChatCreate) -> tuple[UUID, str]:
    """Return (user_uuid, thread_id) or raise the seed's ``ValueError`` when either is missing."""
    if chat_data.user_uuid is None:
        raise InvalidInputError("ChatCreate.user_uuid is required")
    if chat_data.thread_id is None:
        raise InvalidInputError("ChatCreate.thread_id is required")
    return chat_data.user_uuid, chat_data.thread_id


def update_fields(update: Any) -> dict[str, Any]:
    """Return the explicitly-set, non-None fields of an update DTO."""
    return cast(dict[str, Any], update.model_dump(exclude_unset=True, exclude_none=True))


@dataclass(frozen=True, slots=True)
class BranchPage:
    """Which part of a chat's active branch a read wants (``Message.seq`` bounds)."""

    after: int | None = None
    before: int | None = None
    limit: int | None = None

    @property
    def whole(self) -> bool:
        """The whole branch: what the history cache keeps."""
        return self.after is None and self.before is None and self.limit is None

    @property
    def newest_first(self) -> bool:
        """The ``limit`` messages just before ``before``: read newest first, then reversed."""
        return self.limit is not None and self.before is not None and self.after is None


@dataclass(frozen=True, slots=True)
class ChatFilter:
    """Which chats a read wants (each field given narrows it), newest activity first."""

    user_uuid: UUID | None = None
    thread_id: str | None = None
    chat_uuid: UUID | None = None
    tenant_id: str | None = None
    app_id: str | None = None
    after: tuple[datetime, str] | None = None
    """Only chats listed after this ``(updated_at, chat_uuid)`` key."""
    limit: int | None = None
    name_contains: str | None = None
    """Only chats whose name contains this text, ignoring case (chats with no name never)."""
    deleted: bool = False
    """Soft-deleted chats instead of live ones (every read but restore and purge: live)."""
    deleted_after: datetime | None = None
    """With ``deleted``: only chats soft-deleted at or after this time."""
    deleted_before: datetime | None = None
    """With ``deleted``: only chats soft-deleted before this time."""

    def name_like(self) -> str | None:
        """``name_contains`` as a ``LIKE`` pattern escaped with ``\\``, or ``None``.

        ``%`` and ``_`` in the user's text match only themselves.
        """
        if self.name_contains is None:
            return None
        text = self.name_contains
        for special in ("\\", "%", "_"):
            text = text.replace(special, "\\" + special)
        return f"%{text}%"

    def equalities(self) -> list[tuple[str, Any]]:
        """``(column, value)`` of every equality this filter asks for."""
        return _given(
            user_uuid=self.user_uuid,
            thread_id=self.thread_id,
            chat_uuid=self.chat_uuid,
            tenant_id=self.tenant_id,
            app_id=self.app_id,
        )


@dataclass(frozen=True, slots=True)
class MessageKey:
    """Which message a lookup wants: by uuid, or by AG-UI id within a chat."""

    message_uuid: UUID | None = None
    chat_uuid: UUID | None = None
    agui_id: str | None = None

    def equalities(self) -> list[tuple[str, Any]]:
        """``(column, value)`` of every equality this key asks for."""
        return _given(
            message_uuid=self.message_uuid, chat_uuid=self.chat_uuid, agui_id=self.agui_id
        )


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs a read wants: one by key (``run_id`` set, ``running`` not), or else
    running ones, oldest heartbeat first.

    Running runs: of one chat when ``chat_uuid`` is set, only those whose heartbeat is
    older than ``stale_before`` when that is. With ``running`` and ``run_id``: the
    chat's running runs and its run ``run_id`` whatever its status (no ``stale_before``).
    """

    chat_uuid: UUID | None = None
    run_id: str | None = None
    stale_before: datetime | None = None
    running: bool = False


@dataclass(frozen=True, slots=True)
class TreeNode:
    """One message of a chat's tree, without its content: what branching reads."""

    message_uuid: UUID
    parent_uuid: UUID | None
    role: str
    seq: int
    agui_id: str | None = None
    run_id: str | None = None


@dataclass(frozen=True, slots=True)
class Siblings:
    """A message among the messages sharing its parent (the roots share "no parent")."""

    index: int
    """The message's position among ``siblings`` (0-based)."""
    siblings: tuple[UUID, ...]
    """Every message with the same parent, in creation order, the message included."""

    @property
    def count(self) -> int:
        """How many versions this turn has."""
        return len(self.siblings)


def _given(**values: Any) -> list[tuple[str, Any]]:
    return [(name, value) for name, value in values.items() if value is not None]
