"""Tool calls: TOOL_CALL_START/ARGS/END/CHUNK, and results (TOOL_CALL_RESULT).

A call nests in the assistant message ``parent_message_id`` names (of this run, or
stored), else in the run's last assistant message, else in an implicit one opened for
it. A result is kept on its call, which may be a stored call of an earlier run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar
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
from threadstore.fold._table import RecordTable
from threadstore.models import MessageStatus, Role

__all__ = ["ToolFolding"]


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


class ToolFolding(RecordTable):
    """Folds tool call events onto one record per tool call id, nested in a message."""

    def _container(self, parent_message_id: str | None, event: BaseEvent) -> FoldRecord:
        """Return the assistant message a new tool call nests in (see the module rules)."""
        scope = getattr(event, "subagent_run_id", None)
        if parent_message_id is not None:
            named = self.find(parent_message_id, Role.ASSISTANT)
            if named is not None and named.role is Role.ASSISTANT:
                return named
            stored = self.stored_assistant.get(parent_message_id)
            if named is None and stored is not None:
                record = _stored(f"m:{parent_message_id}", RecordKind.MESSAGE, stored)
                record.role = Role.ASSISTANT
                return self.adopt(record)
            if named is None and self.message(parent_message_id) is None:
                record, _ = self.message_for(parent_message_id, Role.ASSISTANT, event)
                record.implicit = True
                return record
            self.warn(f"tool call parent {parent_message_id!r} is not an assistant message")
        last = self.last_message_of(scope)
        if last is not None and last.role is Role.ASSISTANT and last.owned:
            return last
        record, _ = self.message_for(None, Role.ASSISTANT, event)
        record.implicit = True
        return record

    def adopt_call(self, tool_call_id: str) -> FoldRecord | None:
        """Adopt the stored call ``tool_call_id`` still waiting for a result, if there is one."""
        stored = self.pending_calls.pop(tool_call_id, None)
        if stored is None:
            return None
        record = _stored(f"t:{tool_call_id}", RecordKind.TOOL_CALL, stored.uuid)
        record.name, record.status = stored.name, stored.status
        return self.adopt(record)

    def _open_call(
        self, tool_call_id: str, name: str | None, parent_message_id: str | None, event: BaseEvent
    ) -> FoldRecord | None:
        if tool_call_id in self.stored_ids:
            self.warn(f"tool call id {tool_call_id!r} is already stored in the chat; ignored")
            return None
        parent = self._container(parent_message_id, event)
        record = self.open_record(
            RecordKind.TOOL_CALL,
            f"t:{tool_call_id}",
            event,
            agui_id=tool_call_id,
            parent_key=parent.key,
        )
        record.name = name or ""
        if record.subagent_run_id is None:
            self.add_part(record, {"type": "tool"})
        return record

    def _call_target(self, tool_call_id: str, event: BaseEvent, what: str) -> FoldRecord | None:
        record = self.tool_call(tool_call_id)
        if record is None:
            self.warn(f"{what} for unknown tool call {tool_call_id!r}; the call was opened")
            record = self._open_call(tool_call_id, None, None, event)
        return record

    def set_result(self, record: FoldRecord, content: str | Sequence[Any], message_id: str) -> None:
        """Keep a tool result (``content``, from message ``message_id``) on its call."""
        text, as_json = tool_result_text(content)
        record.result, record.result_message_id = text, message_id
        if as_json:
            record.metadata["result_content_parts"] = True
        self.known_ids.add(message_id)
        self.touch(record, content=True)
        if record.in_progress:
            self.close(record)
        else:
            self.mark_closed(record)
        if not record.owned:
            record.status = MessageStatus.COMPLETE

    def _on_tool_start(self, event: ToolCallStartEvent) -> None:
        record = self.tool_call(event.tool_call_id)
        if record is not None:
            self.warn(f"TOOL_CALL_START repeated for tool call {event.tool_call_id!r}")
            if not record.name and record.owned:
                record.name = event.tool_call_name
                self.touch(record)
            return
        self._open_call(event.tool_call_id, event.tool_call_name, event.parent_message_id, event)

    def _on_tool_args(self, event: ToolCallArgsEvent) -> None:
        record = self._call_target(event.tool_call_id, event, "TOOL_CALL_ARGS")
        if record is not None and record.owned:
            record.text.append(event.delta)
            self.touch(record, content=True)

    def _on_tool_end(self, event: ToolCallEndEvent) -> None:
        record = self.tool_call(event.tool_call_id)
        if record is None:
            self.warn(f"TOOL_CALL_END for unknown tool call {event.tool_call_id!r}; ignored")
            return
        self.close(record)

    def _on_tool_result(self, event: ToolCallResultEvent) -> None:
        record = self.tool_call(event.tool_call_id) or self.adopt_call(event.tool_call_id)
        if record is None:
            record = self._call_target(event.tool_call_id, event, "TOOL_CALL_RESULT")
        if record is None:
            return
        if record.result_message_id is not None:
            self.warn(f"tool call {event.tool_call_id!r} already has a result; replaced")
        self.set_result(record, event.content, event.message_id)

    TOOL_HANDLERS: ClassVar[dict[str, Callable[[Any, Any], None]]] = {
        "TOOL_CALL_START": _on_tool_start,
        "TOOL_CALL_ARGS": _on_tool_args,
        "TOOL_CALL_CHUNK": _on_tool_args,  # the delta of its run (codec.READING)
        "TOOL_CALL_END": _on_tool_end,
        "TOOL_CALL_RESULT": _on_tool_result,
    }
