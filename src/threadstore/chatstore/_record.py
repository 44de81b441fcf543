"""The two-method persistence seam: ``ChatRecord``, ``Scope`` and the ``ChatStore`` Protocol.

An app persists a chat by implementing ``save_chat`` and ``load_chat`` against any backend
(a dict, a table, files). A record always holds the chat's *full* canonical history, so a
store never needs diff machinery: each save replaces the last. Implementations may be
synchronous or asynchronous; :func:`save_chat`, :func:`load_chat`, :func:`delete_chat` and
:func:`list_chats` call either kind and await when needed.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Protocol, TypeVar, runtime_checkable

from ag_ui.core import Message

__all__ = [
    "ChatRecord",
    "ChatStore",
    "DeletableChatStore",
    "ListableChatStore",
    "Scope",
    "delete_chat",
    "list_chats",
    "load_chat",
    "save_chat",
]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Scope:
    """Who owns a chat: a user, optionally narrowed to a tenant, app, agent or chat.

    As a filter (``list_chats``), only the fields that are set are compared, each by exact
    match; ``user_id`` is always set, so a filter never spans users.
    """

    user_id: str
    tenant_id: str | None = None
    app_id: str | None = None
    agent_id: str | None = None
    chat_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.user_id, str) or not self.user_id:
            raise ValueError("Scope.user_id is required and must be a non-empty string")

    def matches(self, owner: Scope) -> bool:
        """Whether ``owner`` (a record's scope) has every field this filter sets."""
        return all(
            getattr(self, each.name) is None
            or getattr(self, each.name) == getattr(owner, each.name)
            for each in fields(self)
        )


def _now() -> datetime:
    # Milliseconds, as the record's JSON form keeps them (``updatedAt``).
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


@dataclass(frozen=True, slots=True)
class ChatRecord:
    """One chat as a ``ChatStore`` saves it: its full canonical history and its owner.

    ``messages`` are AG-UI messages, oldest first; bytes may appear anywhere inside them
    (metadata, extra fields) and survive :func:`~threadstore.chat.serialize_chat_record`.
    ``parent_id`` is the chat this one was forked from (a linear chat leaves it unset).
    """

    chat_id: str
    scope: Scope
    messages: tuple[Message, ...] = ()
    parent_id: str | None = None
    updated_at: datetime = field(default_factory=_now)

    def __post_init__(self) -> None:
        if not isinstance(self.chat_id, str) or not self.chat_id:
            raise ValueError("ChatRecord.chat_id is required and must be a non-empty string")
        if not isinstance(self.scope, Scope):
            raise TypeError(f"ChatRecord.scope must be a Scope, got {type(self.scope).__name__}")
        if self.updated_at.tzinfo is None:
            raise ValueError("ChatRecord.updated_at must be timezone-aware")
        # Accept any sequence, keep an immutable one: a saved record never changes under
        # the store that holds it.
        object.__setattr__(self, "messages", tuple(self.messages))


@runtime_checkable
class ChatStore(Protocol):
    """Persist whole chats: two methods, synchronous or asynchronous."""

    def save_chat(self, record: ChatRecord) -> Awaitable[None] | None:
        """Store ``record``, replacing what was stored under its ``chat_id``."""
        ...

    def load_chat(self, chat_id: str) -> ChatRecord | Awaitable[ChatRecord | None] | None:
        """Return the stored record, or ``None`` when there is none (or it is unreadable)."""
        ...


@runtime_checkable
class DeletableChatStore(ChatStore, Protocol):
    """A ``ChatStore`` that can also delete a chat (optional; the run loop never calls it)."""

    def delete_chat(self, chat_id: str) -> Awaitable[None] | None:
        """Remove the chat; a missing one is not an error."""
        ...


@runtime_checkable
class ListableChatStore(ChatStore, Protocol):
    """A ``ChatStore`` that can also enumerate chat ids, e.g. for a picker."""

    def list_chats(self, scope: Scope | None = None) -> Sequence[str] | Awaitable[Sequence[str]]:
        """Return the ids of the chats whose scope matches ``scope`` (all when ``None``)."""
        ...


async def _resolved(value: _T | Awaitable[_T]) -> _T:
    if inspect.isawaitable(value):
        return await value
    return value


async def save_chat(store: ChatStore, record: ChatRecord) -> None:
    """Call ``store.save_chat``, awaiting it when the store is asynchronous."""
    await _resolved(store.save_chat(record))


async def load_chat(store: ChatStore, chat_id: str) -> ChatRecord | None:
    """Call ``store.load_chat``, awaiting it when the store is asynchronous."""
    return await _resolved(store.load_chat(chat_id))


async def delete_chat(store: ChatStore, chat_id: str) -> None:
    """Delete through a store that supports it; ``TypeError`` naming the store otherwise."""
    if not isinstance(store, DeletableChatStore):
        raise TypeError(f"{type(store).__name__} has no delete_chat method")
    await _resolved(store.delete_chat(chat_id))


async def list_chats(store: ChatStore, scope: Scope | None = None) -> list[str]:
    """List through a store that supports it; ``TypeError`` naming the store otherwise."""
    if not isinstance(store, ListableChatStore):
        raise TypeError(f"{type(store).__name__} has no list_chats method")
    return list(await _resolved(store.list_chats(scope)))
