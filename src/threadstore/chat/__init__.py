"""The chat layer: the two-method ``ChatStore`` seam, its reference stores and codec."""

from threadstore.chat.codec import deserialize_chat_record, serialize_chat_record
from threadstore.chat.record import (
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
from threadstore.chat.stores import InMemoryChatStore, JsonlChatStore

__all__ = [
    "ChatRecord",
    "ChatStore",
    "DeletableChatStore",
    "InMemoryChatStore",
    "JsonlChatStore",
    "ListableChatStore",
    "Scope",
    "delete_chat",
    "deserialize_chat_record",
    "list_chats",
    "load_chat",
    "save_chat",
    "serialize_chat_record",
]
