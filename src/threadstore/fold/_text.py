"""Text messages: TEXT_MESSAGE_START/CONTENT/END and their CHUNK form, one record per id."""

from __future__ import annotations

from ag_ui.core import (
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)

from threadstore.fold._table import Handler, RecordTable
from threadstore.models import MessageStatus, Role

__all__ = ["HANDLERS"]


def _on_text_start(fold: RecordTable, event: TextMessageStartEvent) -> None:
    record, opened = fold.message_for(event.message_id, Role(event.role or "assistant"), event)
    if not opened:
        if not record.implicit:
            fold.warn(f"TEXT_MESSAGE_START repeated for message {event.message_id!r}")
        elif not record.in_progress and record.owned:
            # The message held only finished tool calls so far; it streams again.
            record.status, record.in_progress = MessageStatus.ACTIVE, True
            fold.touch(record)
        record.implicit = False
    if event.name is not None and record.name != event.name:
        record.name = event.name
        fold.touch(record)


def _on_text_content(fold: RecordTable, event: TextMessageContentEvent) -> None:
    agui_id = event.message_id
    record = fold.find(agui_id, Role.ASSISTANT)
    if record is None:
        fold.warn(f"TEXT_MESSAGE_CONTENT for unknown message {agui_id!r}; the message was opened")
        record, _ = fold.message_for(agui_id, Role.ASSISTANT, event)
    if event.delta:
        fold.grow_segment("text", record)
    fold.extend(record, event.delta)


def _on_text_end(fold: RecordTable, event: TextMessageEndEvent) -> None:
    agui_id = event.message_id
    record = fold.known(fold.find(agui_id, Role.ASSISTANT), "TEXT_MESSAGE_END", "message", agui_id)
    if record is None:
        return
    record.implicit = False
    fold.seal_segment("text", record)
    fold.close(record)


HANDLERS: dict[str, Handler] = {
    "TEXT_MESSAGE_START": _on_text_start,
    "TEXT_MESSAGE_CONTENT": _on_text_content,
    "TEXT_MESSAGE_CHUNK": _on_text_content,  # the delta of its run (codec.READING)
    "TEXT_MESSAGE_END": _on_text_end,
}
