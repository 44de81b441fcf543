"""Concrete chat and message repositories over any store, under the seed layer's names.

Code written for the seed layer constructs ``ChatRepository(...)`` and
``MessageRepository(...)`` by name and hands them to the storage agent. Here both wrap
one store (a :class:`~threadstore.store.Store`, or any object with the repository
methods) and forward each call to it (``ChatRepositoryLike`` and ``MessageRepositoryLike``
document each method). Whatever else the store offers (chat state, run
records, batched writes) stays reachable through them, so a storage agent given these
repositories persists exactly what it persists given the store itself.

:class:`ChatSessionRegistry` keeps the seed layer's chat-to-session map. A chat here is
its own session (its id is the chat's uuid), so the map never misses a live chat on
another replica or after a restart; the repositories take one as the seed's do.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, TypeVar
from uuid import UUID

from threadstore import models
from threadstore.store import ChatRepositoryLike, MessageRepositoryLike, Store

__all__ = ["ChatRepository", "ChatSessionRegistry", "MessageRepository"]


class ChatSessionRegistry:
    """Map a chat's uuid to its session id (the seed layer's name and methods).

    A chat is its own session here, so a chat's session id is ``str(chat_uuid)``. A
    bounded in-process cache answers :meth:`get_session_id`; :meth:`resolve` asks the
    store on a miss, an indexed primary-key read, so every replica resolves every chat.
    """

    def __init__(self, store: Store, *, max_entries: int = 10_000) -> None:
        self.store = store
        self._max_entries = max_entries
        self._cache: OrderedDict[UUID, str] = OrderedDict()

    def register(self, chat_uuid: UUID, session_id: str | None = None) -> None:
        """Cache the chat's session id (its own uuid unless given)."""
        self._cache[chat_uuid] = session_id or str(chat_uuid)
        self._cache.move_to_end(chat_uuid)
        while len(self._cache) > self._max_entries:
            self._cache.popitem(last=False)

    def unregister(self, chat_uuid: UUID) -> None:
        """Drop a cached mapping (after the chat is deleted)."""
        self._cache.pop(chat_uuid, None)

    def get_session_id(self, chat_uuid: UUID) -> str | None:
        """Return the cached session id of a chat, without asking the store."""
        return self._cache.get(chat_uuid)

    async def resolve(self, chat_uuid: UUID) -> str | None:
        """Return the chat's session id, asking the store on a cache miss; ``None`` if unknown."""
        cached = self._cache.get(chat_uuid)
        if cached is not None:
            return cached
        if await self.store.chats.get_chat(chat_uuid) is None:
            return None
        self.register(chat_uuid)
        return str(chat_uuid)


_S = TypeVar("_S")


class _OverStore(Generic[_S]):
    """Forwards what a subclass does not define to the store it wraps.

    Both repositories take the ``registry`` the seed layer's constructors take.
    """

    def __init__(self, store: _S, registry: ChatSessionRegistry | None = None) -> None:
        self.store: _S = store
        self.registry = registry

    def __getattr__(self, name: str) -> Any:
        # Only reached for names the class lacks: the store's optional capabilities.
        if name == "store":
            raise AttributeError(name)
        return getattr(self.store, name)


class ChatRepository(_OverStore[ChatRepositoryLike]):
    """Chat persistence over ``store``: a ``Store`` or any ``ChatRepositoryLike``.

    A ``registry`` given, as the seed layer's repositories take one, learns each chat
    created and forgets each one deleted.
    """

    async def create_chat(self, chat_data: models.ChatCreate) -> models.Chat:
        chat = await self.store.create_chat(chat_data)
        if self.registry is not None:
            self.registry.register(chat.chat_uuid)
        return chat

    async def get_chat_by_thread_id(self, user_uuid: UUID, thread_id: str) -> models.Chat | None:
        return await self.store.get_chat_by_thread_id(user_uuid, thread_id)

    async def get_all_chats(self, user_uuid: UUID | None = None) -> Sequence[models.Chat]:
        return await self.store.get_all_chats(user_uuid)

    async def update_chat_name(self, chat_uuid: UUID, name: str) -> models.Chat | None:
        return await self.store.update_chat_name(chat_uuid, name)

    async def delete_chat(self, chat_uuid: UUID) -> models.Chat | None:
        if self.registry is not None:
            self.registry.unregister(chat_uuid)
        return await self.store.delete_chat(chat_uuid)


class MessageRepository(_OverStore[MessageRepositoryLike]):
    """Message persistence over ``store``: a ``Store`` or any ``MessageRepositoryLike``.

    Its ``registry`` is only kept: a message needs no chat lookup here.
    """

    def transaction(self) -> AbstractAsyncContextManager[None]:
        return self.store.transaction()

    async def create_message(self, message_data: models.MessageCreate) -> models.Message:
        return await self.store.create_message(message_data)

    async def update_message(
        self, message_uuid: UUID, update: models.MessageUpdate
    ) -> models.Message | None:
        return await self.store.update_message(message_uuid, update)

    async def create_message_tool_call(self, data: models.MessageToolCallCreate) -> models.ToolCall:
        return await self.store.create_message_tool_call(data)

    async def update_message_tool_call(
        self, uuid: UUID, update: models.MessageToolCallUpdate
    ) -> models.ToolCall | None:
        return await self.store.update_message_tool_call(uuid, update)

    async def create_message_reasoning(
        self, data: models.MessageReasoningCreate
    ) -> models.Reasoning:
        return await self.store.create_message_reasoning(data)

    async def update_message_reasoning(
        self, uuid: UUID, update: models.MessageReasoningUpdate
    ) -> models.Reasoning | None:
        return await self.store.update_message_reasoning(uuid, update)

    async def get_message(self, message_uuid: UUID) -> models.Message | None:
        return await self.store.get_message(message_uuid)

    async def get_message_by_agui_id(self, chat_uuid: UUID, agui_id: str) -> models.Message | None:
        return await self.store.get_message_by_agui_id(chat_uuid, agui_id)

    async def get_tool_call_by_agui_id(
        self, message_uuid: UUID, tool_call_id: str
    ) -> models.ToolCall | None:
        return await self.store.get_tool_call_by_agui_id(message_uuid, tool_call_id)

    async def get_chat_messages(self, chat_uuid: UUID) -> Sequence[models.Message]:
        return await self.store.get_chat_messages(chat_uuid)

    async def get_last_messages(self, chat_uuids: list[UUID]) -> dict[UUID, models.Message]:
        return await self.store.get_last_messages(chat_uuids)
