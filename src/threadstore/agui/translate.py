"""Stored history <-> AG-UI messages, importable here as before (see threadstore.codec)."""

from threadstore.codec import (
    AGUI_METADATA_KEY,
    DEFAULT_MIME_TYPE,
    TOOL_CALL_ID_METADATA_KEY,
    message_create_from_agui,
    tool_result_message_id,
    translate_messages,
)

__all__ = [
    "AGUI_METADATA_KEY",
    "DEFAULT_MIME_TYPE",
    "TOOL_CALL_ID_METADATA_KEY",
    "message_create_from_agui",
    "tool_result_message_id",
    "translate_messages",
]
