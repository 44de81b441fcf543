"""What a run needs to know of the chat's stored history: ids it holds, calls still open."""

from __future__ import annotations

from collections.abc import Iterable

from threadstore.codec.messages import (
    SUBAGENT_METADATA_KEY,
    replayed_tool_error,
    tool_result_message_id,
)
from threadstore.models import Message, ToolCall

__all__ = ["pending_tool_calls", "stored_ids"]


def stored_ids(messages: Iterable[Message]) -> set[str]:
    """Every id a client may echo for stored history: AG-UI ids, uuids, tool call and result ids."""
    ids: set[str] = set()
    for message in messages:
        ids.add(str(message.message_uuid))
        if message.agui_id:
            ids.add(message.agui_id)
        subagent = message.metadata.get(SUBAGENT_METADATA_KEY)
        for call in message.tool_calls:
            ids.update((call.tool_call_id, str(call.uuid)))
            # Every result a replay lists, including one it gives an unanswered call.
            if (
                call.result_message_id
                or call.content is not None
                or replayed_tool_error(call, subagent) is not None
            ):
                ids.add(tool_result_message_id(call))
        for step in message.reasonings:
            ids.add(str(step.uuid))
            if step.agui_id:
                ids.add(step.agui_id)
    return ids


def pending_tool_calls(messages: Iterable[Message]) -> dict[str, ToolCall]:
    """Stored tool calls that have no result yet, by AG-UI tool call id."""
    return {
        call.tool_call_id: call
        for message in messages
        for call in message.tool_calls
        if call.content is None and call.result_message_id is None
    }
