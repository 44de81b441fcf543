"""AG-UI <-> threadstore conversion: history to AG-UI messages and back, legacy events.

Pure functions and event classes with no store and no event loop, so the fold (which
reads THINKING_* events and client messages) and the AG-UI layer above it share them.
"""

from threadstore.codec.messages import (
    AGUI_METADATA_KEY,
    DEFAULT_MIME_TYPE,
    TOOL_CALL_ID_METADATA_KEY,
    message_create_from_agui,
    tool_result_message_id,
    tool_result_text,
    translate_messages,
)
from threadstore.codec.thinking import (
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
    "THINKING_TITLE_METADATA_KEY",
    "TOOL_CALL_ID_METADATA_KEY",
    "ThinkingEndEvent",
    "ThinkingEvent",
    "ThinkingStartEvent",
    "ThinkingTextMessageContentEvent",
    "ThinkingTextMessageEndEvent",
    "ThinkingTextMessageStartEvent",
    "ThinkingTranslator",
    "message_create_from_agui",
    "parse_event",
    "to_reasoning_event",
    "to_reasoning_events",
    "tool_result_message_id",
    "tool_result_text",
    "translate_messages",
]
