"""MESSAGES_SNAPSHOT: store the messages of a snapshot that are not known yet, as complete.

Messages already known (stored in the chat, or produced by this run) are never
rewritten: the store is the source of truth. A tool message answers its call if that
call has no result yet.
"""

from __future__ import annotations

import copy
from typing import Any
from uuid import UUID

from ag_ui.core import ActivityMessage as AguiActivityMessage
from ag_ui.core import (
    AssistantMessage,
    DeveloperMessage,
    MessagesSnapshotEvent,
    ReasoningMessage,
    SystemMessage,
    TextInputContent,
    ToolMessage,
    UserMessage,
)

from threadstore.codec import AGUI_METADATA_KEY, message_create_from_agui
from threadstore.errors import InvalidInputError
from threadstore.fold._reasoning import open_reasoning
from threadstore.fold._records import FoldRecord, RecordKind
from threadstore.fold._table import Handler, RecordTable
from threadstore.fold._tools import adopt_call, set_result
from threadstore.models import Role

__all__ = ["HANDLERS"]


def _on_messages_snapshot(fold: RecordTable, event: MessagesSnapshotEvent) -> None:
    for message in event.messages:
        if message.id in fold.known_ids:
            continue
        if isinstance(message, ToolMessage):
            _snapshot_tool_result(fold, message)
            continue
        _snapshot_message(fold, message)


def _snapshot_tool_result(fold: RecordTable, message: ToolMessage) -> None:
    call = fold.tool_call(message.tool_call_id) or adopt_call(fold, message.tool_call_id)
    if call is None or call.result_message_id is not None:
        fold.warn(f"snapshot tool message {message.id!r} answers no pending call; skipped")
        return
    set_result(fold, call, message.content, message.id)


def _snapshot_message(fold: RecordTable, message: Any) -> None:
    if isinstance(message, ReasoningMessage):
        step = open_reasoning(fold, message.id, None, nested=False)
        step.text.replace(message.content)
        step.encrypted_value = message.encrypted_value
        fold.close(step)
        return
    record, _ = fold.message_for(message.id, Role(message.role), None)
    if message.subagent_run_id is not None:
        record.metadata["subagent_run_id"] = message.subagent_run_id
    if message.metadata:
        record.metadata[AGUI_METADATA_KEY] = message.metadata
    if isinstance(message, AguiActivityMessage):
        record.activity_type = message.activity_type
        record.activity_content = copy.deepcopy(message.content)
    elif isinstance(message, UserMessage | SystemMessage | DeveloperMessage):
        try:
            create = message_create_from_agui(message, UUID(int=0), fold.run_id)
        except InvalidInputError as exc:
            fold.warn(f"snapshot message {message.id!r}: {exc}; stored as text only")
            text = message.content
            if not isinstance(text, str):
                parts = (part.text for part in text if isinstance(part, TextInputContent))
                text = "\n".join(parts)  # the text parts, as the other parts cannot be stored
            record.text.replace(text)
        else:
            record.text.replace(create.content)
            record.content_parts = create.content_parts
        record.name, record.encrypted_value = message.name, message.encrypted_value
    elif isinstance(message, AssistantMessage):
        record.text.replace(message.content or "")
        record.name, record.encrypted_value = message.name, message.encrypted_value
        _snapshot_calls(fold, record, message)
    fold.close(record)


def _snapshot_calls(fold: RecordTable, record: FoldRecord, message: AssistantMessage) -> None:
    for call in message.tool_calls or ():
        if call.id in fold.known_ids:
            continue
        child = fold.open_record(
            RecordKind.TOOL_CALL, f"t:{call.id}", None, agui_id=call.id, parent_key=record.key
        )
        child.name = call.function.name
        child.text.replace(call.function.arguments)
        if call.encrypted_value is not None:
            child.metadata["encrypted_value"] = call.encrypted_value
        fold.close(child)


HANDLERS: dict[str, Handler] = {
    "MESSAGES_SNAPSHOT": _on_messages_snapshot,
}
