"""The two-method ``ChatStore`` persistence seam, its reference stores and its codec.

An app persists whole chats (``ChatRecord``: the full canonical history) through
``save_chat`` / ``load_chat`` on any backend: in memory (:class:`InMemoryChatStore`),
JSON lines on disk (:class:`JsonlChatStore`), any threadstore store
(:class:`StoreChatStore`), or its own. See docs/chat-store.md.
"""

from __future__ import annotations

from threadstore.chatstore._codec import deserialize_chat_record, serialize_chat_record
from threadstore.chatstore._record import (
    ChatRecord,
    ChatStore,
    DeletableChatStore,
    ListableChatStore,
    Scope,
    delete_chat,
    list_chats,
    load_chat,
    save_chat,
)
from threadstore.chatstore._store_adapter import StoreChatStore
from threadstore.chatstore._stores import InMemoryChatStore, JsonlChatStore

__all__ = [
    "ChatRecord",
    "ChatStore",
    "DeletableChatStore",
    "InMemoryChatStore",
    "JsonlChatStore",
    "ListableChatStore",
    "Scope",
    "StoreChatStore",
    "delete_chat",
    "deserialize_chat_record",
    "list_chats",
    "load_chat",
    "save_chat",
    "serialize_chat_record",
]
