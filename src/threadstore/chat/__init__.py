"""The chat layer: a pure chat engine and the two-method ``ChatStore`` persistence seam.

The engine (AG-UI events -> a UI turn with ordered parts; UI <-> canonical; branch cuts)
is pure: no I/O, no asyncio; functions take values and return new ones, never changing
what they were given. The seam (``ChatRecord``, ``ChatStore``, reference stores and the
binary-safe codec; ``StoreChatStore`` puts any threadstore ``Store`` behind it) persists
whole chats. See docs/chat-engine.md and docs/chat-store.md.
"""

from __future__ import annotations

from threadstore.chat._branch import (
    ChatHistory,
    branch_before_user_message,
    drop_trailing_assistant,
)
from threadstore.chat._codec import deserialize_chat_record, serialize_chat_record
from threadstore.chat._convert import (
    HistoryMessage,
    assistant_message_from_turn,
    canonical_from_ui,
    tool_result_message,
    tool_result_message_id,
    ui_from_messages,
)
from threadstore.chat._record import (
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
from threadstore.chat._reducer import (
    CHANNEL_EVENTS,
    CITATION_EVENT_NAME,
    apply_event,
    create_assistant_turn,
)
from threadstore.chat._seal import seal_assistant_turn
from threadstore.chat._store_adapter import StoreChatStore
from threadstore.chat._stores import InMemoryChatStore, JsonlChatStore
from threadstore.chat._types import (
    AssistantTurn,
    CitationPart,
    DataPart,
    FilePart,
    ReasoningPart,
    StepInfo,
    StepStartPart,
    SubAgentFrame,
    TextPart,
    ToolPart,
    ToolRunState,
    TurnError,
    UIMessage,
    UIMessagePart,
    UIToolCall,
)

__all__ = [
    "CHANNEL_EVENTS",
    "CITATION_EVENT_NAME",
    "AssistantTurn",
    "ChatHistory",
    "ChatRecord",
    "ChatStore",
    "CitationPart",
    "DataPart",
    "DeletableChatStore",
    "FilePart",
    "HistoryMessage",
    "InMemoryChatStore",
    "JsonlChatStore",
    "ListableChatStore",
    "ReasoningPart",
    "Scope",
    "StepInfo",
    "StepStartPart",
    "StoreChatStore",
    "SubAgentFrame",
    "TextPart",
    "ToolPart",
    "ToolRunState",
    "TurnError",
    "UIMessage",
    "UIMessagePart",
    "UIToolCall",
    "apply_event",
    "assistant_message_from_turn",
    "branch_before_user_message",
    "canonical_from_ui",
    "create_assistant_turn",
    "delete_chat",
    "deserialize_chat_record",
    "drop_trailing_assistant",
    "list_chats",
    "load_chat",
    "save_chat",
    "seal_assistant_turn",
    "serialize_chat_record",
    "tool_result_message",
    "tool_result_message_id",
    "ui_from_messages",
]
