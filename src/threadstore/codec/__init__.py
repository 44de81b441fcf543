"""AG-UI <-> threadstore conversion: history to AG-UI messages and back, legacy events.

Pure functions and event classes with no store and no event loop, so the fold (which
reads THINKING_* events and client messages) and the AG-UI layer above it share them.
"""

from threadstore.codec._extended import ExtendedBaseMessage, extended_messages
from threadstore.codec._messages import (
    AGUI_METADATA_KEY,
    DEFAULT_MIME_TYPE,
    SUBAGENT_METADATA_KEY,
    TOOL_CALL_ID_METADATA_KEY,
    HistoryTranslator,
    IdsAdded,
    message_create_from_agui,
    replayed_tool_error,
    tool_result_message_id,
    tool_result_text,
    translate_messages,
)
from threadstore.codec._names import chat_name_from_messages
from threadstore.codec._thinking import (
    THINKING_TITLE_METADATA_KEY,
    ThinkingEndEvent,
    ThinkingEvent,
    ThinkingStartEvent,
    ThinkingTextMessageContentEvent,
    ThinkingTextMessageEndEvent,
    ThinkingTextMessageStartEvent,
    ThinkingTranslator,
    parse_event,
    to_reasoning_event,
    to_reasoning_events,
)

__all__ = [
    "AGUI_METADATA_KEY",
    "DEFAULT_MIME_TYPE",
    "SUBAGENT_METADATA_KEY",
    "THINKING_TITLE_METADATA_KEY",
    "TOOL_CALL_ID_METADATA_KEY",
    "ExtendedBaseMessage",
    "HistoryTranslator",
    "IdsAdded",
    "ThinkingEndEvent",
    "ThinkingEvent",
    "ThinkingStartEvent",
    "ThinkingTextMessageContentEvent",
    "ThinkingTextMessageEndEvent",
    "ThinkingTextMessageStartEvent",
    "ThinkingTranslator",
    "chat_name_from_messages",
    "extended_messages",
    "message_create_from_agui",
    "parse_event",
    "replayed_tool_error",
    "to_reasoning_event",
    "to_reasoning_events",
    "tool_result_message_id",
    "tool_result_text",
    "translate_messages",
]
