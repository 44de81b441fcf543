"""Tool calls: TOOL_CALL_START/ARGS/END/CHUNK, and results (TOOL_CALL_RESULT).

A call nests in the assistant message ``parent_message_id`` names (of this run, or
stored), else in the run's last assistant message, else in an implicit one opened for
it. A result is kept on its call, which may be a stored call of an earlier run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from ag_ui.core import (
    BaseEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from threadstore.codec import tool_result_text
from threadstore.fold._records import FoldRecord, RecordKind
from threadstore.fold._table import Handler, RecordTable
from threadstore.models import MessageStatus, Role

__all__ = ["HANDLERS", "adopt_call", "set_result"]


def _stored(key: str, kind: RecordKind, uuid: UUID) -> FoldRecord:
    """A finished record of an earlier run, stored under ``uuid``, that this run updates."""
    agui_id = key.split(":", 1)[1]
    return FoldRecord(
        key=key,
        kind=kind,
        order=0,
        agui_id=agui_id,
        status=MessageStatus.COMPLETE,
        in_progress=False,
        owned=False,
        uuid=uuid,
    )


def _container(fold: RecordTable, parent_message_id: str | None, event: BaseEvent) -> FoldRecord:
    """Return the assistant message a new tool call nests in (see the module rules)."""
    scope = getattr(event, "subagent_run_id", None)
    if parent_message_id is not None:
        named = fold.find(parent_message_id, Role.ASSISTANT)
        if named is not None and named.role is Role.ASSISTANT:
            return named
        stored = fold.stored_assistant.get(parent_message_id)
        if named is None and stored is not None:
            record = _stored(f"m:{parent_message_id}", RecordKind.MESSAGE, stored)
            record.role = Role.ASSISTANT
            return fold.adopt(record)
        if named is None and fold.message(parent_message_id) is None:
            record, _ = fold.message_for(parent_message_id, Role.ASSISTANT, event)
            record.implicit = True
            return record
        fold.warn(f"tool call parent {parent_message_id!r} is not an assistant message")
    last = fold.last_message_of(scope)
    if last is not None and last.role is Role.ASSISTANT and last.owned:
        return last
    record, _ = fold.message_for(None, Role.ASSISTANT, event)
    record.implicit = True
    return record


def adopt_call(fold: RecordTable, tool_call_id: str) -> FoldRecord | None:
    """Adopt the stored call ``tool_call_id`` still waiting for a result, if there is one."""
    stored = fold.pending_calls.pop(tool_call_id, None)
    if stored is None:
        return None
    record = _stored(f"t:{tool_call_id}", RecordKind.TOOL_CALL, stored.uuid)
    record.name, record.status = stored.name, stored.status
    return fold.adopt(record)


def _open_call(
    fold: RecordTable, tool_call_id: str, name: str | None, parent_id: str | None, event: BaseEvent
) -> FoldRecord | None:
    if tool_call_id in fold.stored_ids:
        fold.warn(f"tool call id {tool_call_id!r} is already stored in the chat; ignored")
        return None
    parent = _container(fold, parent_id, event)
    record = fold.open_record(
        RecordKind.TOOL_CALL,
        f"t:{tool_call_id}",
        event,
        agui_id=tool_call_id,
        parent_key=parent.key,
    )
    record.name = name or ""
    if record.subagent_run_id is None:
        fold.add_part(record, {"type": "tool"})
    return record


def _call_target(
    fold: RecordTable, tool_call_id: str, event: BaseEvent, what: str
) -> FoldRecord | None:
    record = fold.tool_call(tool_call_id)
    if record is None:
        fold.warn(f"{what} for unknown tool call {tool_call_id!r}; the call was opened")
        record = _open_call(fold, tool_call_id, None, None, event)
    return record


def set_result(
    fold: RecordTable, record: FoldRecord, content: str | Sequence[Any], message_id: str
) -> None:
    """Keep a tool result (``content``, from message ``message_id``) on its call."""
    text, as_json = tool_result_text(content)
    record.result, record.result_message_id = text, message_id
    if as_json:
        record.metadata["result_content_parts"] = True
    fold.known_ids.add(message_id)
    fold.touch(record, content=True)
    if record.in_progress:
        fold.close(record)
    else:
        fold.mark_closed(record)
    if not record.owned:
        record.status = MessageStatus.COMPLETE


def _on_tool_start(fold: RecordTable, event: ToolCallStartEvent) -> None:
    record = fold.tool_call(event.tool_call_id)
    if record is not None:
        fold.warn(f"TOOL_CALL_START repeated for tool call {event.tool_call_id!r}")
        if not record.name and record.owned:
            record.name = event.tool_call_name
            fold.touch(record)
        return
    _open_call(fold, event.tool_call_id, event.tool_call_name, event.parent_message_id, event)


def _on_tool_args(fold: RecordTable, event: ToolCallArgsEvent) -> None:
    record = _call_target(fold, event.tool_call_id, event, "TOOL_CALL_ARGS")
    if record is not None and record.owned:
        fold.extend(record, event.delta)


def _on_tool_end(fold: RecordTable, event: ToolCallEndEvent) -> None:
    call_id = event.tool_call_id
    record = fold.known(fold.tool_call(call_id), "TOOL_CALL_END", "tool call", call_id)
    if record is not None:
        fold.close(record)


def _on_tool_result(fold: RecordTable, event: ToolCallResultEvent) -> None:
    record = fold.tool_call(event.tool_call_id) or adopt_call(fold, event.tool_call_id)
    if record is None:
        record = _call_target(fold, event.tool_call_id, event, "TOOL_CALL_RESULT")
    if record is None:
        return
    if record.result_message_id is not None:
        fold.warn(f"tool call {event.tool_call_id!r} already has a result; replaced")
    set_result(fold, record, event.content, event.message_id)


HANDLERS: dict[str, Handler] = {
    "TOOL_CALL_START": _on_tool_start,
    "TOOL_CALL_ARGS": _on_tool_args,
    "TOOL_CALL_CHUNK": _on_tool_args,  # the delta of its run (codec.READING)
    "TOOL_CALL_END": _on_tool_end,
    "TOOL_CALL_RESULT": _on_tool_result,
}
