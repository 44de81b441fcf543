"""AG-UI <-> threadstore conversion: history to AG-UI messages and back.

Pure functions and event classes with no store and no event loop, so the fold (which
reads client messages) and the AG-UI layer above it share them; with them the one
reading of an AG-UI stream (:class:`StreamReader`, :data:`READING`), which the fold, the
chat engine and the server's reconnect snapshot all read events through. The
deprecated ``THINKING_*`` events are :mod:`threadstore.codec.thinking`.
"""

from threadstore.codec._events import now_ms, run_finished, run_started
from threadstore.codec._extended import ExtendedBaseMessage, extended_messages
from threadstore.codec._messages import (
    AGUI_METADATA_KEY,
    DEFAULT_MIME_TYPE,
    SUBAGENT_METADATA_KEY,
    TOOL_CALL_ID_METADATA_KEY,
    TRANSLATION,
    HistoryTranslator,
    IdsAdded,
    KeptTranslation,
    message_create_from_agui,
    replayed_tool_error,
    summary_message,
    tool_result_message_id,
    tool_result_text,
    translate_messages,
)
from threadstore.codec._names import chat_name_from_messages
from threadstore.codec._stream import READING, Act, Element, StreamReader, event_kind

__all__ = [
    "AGUI_METADATA_KEY",
    "DEFAULT_MIME_TYPE",
    "READING",
    "SUBAGENT_METADATA_KEY",
    "TOOL_CALL_ID_METADATA_KEY",
    "TRANSLATION",
    "Act",
    "Element",
    "ExtendedBaseMessage",
    "HistoryTranslator",
    "IdsAdded",
    "KeptTranslation",
    "StreamReader",
    "chat_name_from_messages",
    "event_kind",
    "extended_messages",
    "message_create_from_agui",
    "now_ms",
    "replayed_tool_error",
    "run_finished",
    "run_started",
    "summary_message",
    "tool_result_message_id",
    "tool_result_text",
    "translate_messages",
]
