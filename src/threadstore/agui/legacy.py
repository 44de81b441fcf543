"""THINKING_* events AG-UI 1.0 dropped, importable here as before (see threadstore.codec)."""

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
    "THINKING_TITLE_METADATA_KEY",
    "ThinkingEndEvent",
    "ThinkingEvent",
    "ThinkingStartEvent",
    "ThinkingTextMessageContentEvent",
    "ThinkingTextMessageEndEvent",
    "ThinkingTextMessageStartEvent",
    "ThinkingTranslator",
    "parse_event",
    "to_reasoning_event",
    "to_reasoning_events",
]
