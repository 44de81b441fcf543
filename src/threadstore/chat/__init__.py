"""The pure chat engine: AG-UI events -> a UI turn with ordered parts; UI <-> canonical.

Pure: no I/O, no asyncio, nothing of the store; functions take values and return new
ones, never changing what they were given (branch cuts included). Persisting whole
chats through the two-method ``ChatStore`` seam is :mod:`threadstore.chatstore`'s. See
docs/chat-engine.md.
"""

from __future__ import annotations

from threadstore.chat._branch import (
    ChatHistory,
    branch_before_user_message,
    drop_trailing_assistant,
)
from threadstore.chat._convert import (
    assistant_message_from_turn,
    canonical_from_ui,
    tool_result_message,
    ui_from_messages,
)
from threadstore.chat._reducer import (
    CHANNEL_EVENTS,
    CITATION_EVENT_NAME,
    apply_event,
    create_assistant_turn,
)
from threadstore.chat._seal import seal_assistant_turn
from threadstore.chat._types import (
    AssistantTurn,
    CitationPart,
    DataPart,
    FilePart,
    ReasoningPart,
    StepStartPart,
    SubAgentFrame,
    TextPart,
    ToolPart,
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
    "CitationPart",
    "DataPart",
    "FilePart",
    "ReasoningPart",
    "StepStartPart",
    "SubAgentFrame",
    "TextPart",
    "ToolPart",
    "TurnError",
    "UIMessage",
    "UIMessagePart",
    "UIToolCall",
    "apply_event",
    "assistant_message_from_turn",
    "branch_before_user_message",
    "canonical_from_ui",
    "create_assistant_turn",
    "drop_trailing_assistant",
    "seal_assistant_turn",
    "tool_result_message",
    "ui_from_messages",
]
