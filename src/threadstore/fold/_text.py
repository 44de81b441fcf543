"""Text messages: TEXT_MESSAGE_START/CONTENT/END and their CHUNK form."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from ag_ui.core import (
    BaseEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)

from threadstore.fold._records import FoldRecord
from threadstore.fold._table import RecordTable
from threadstore.models import MessageStatus, Role

__all__ = ["TextFolding"]


class TextFolding(RecordTable):
    """Folds text message events onto one message per AG-UI message id."""

    def _text_target(self, agui_id: str, event: BaseEvent, what: str) -> FoldRecord:
        record = self.find(agui_id, Role.ASSISTANT)
        if record is None:
            self.warn(f"{what} for unknown message {agui_id!r}; the message was opened")
            record, _ = self.message_for(agui_id, Role.ASSISTANT, event)
        return record

    def _on_text_start(self, event: TextMessageStartEvent) -> None:
        record, opened = self.message_for(event.message_id, Role(event.role or "assistant"), event)
        if not opened:
            if not record.implicit:
                self.warn(f"TEXT_MESSAGE_START repeated for message {event.message_id!r}")
            elif not record.in_progress and record.owned:
                # The message held only finished tool calls so far; it streams again.
                record.status, record.in_progress = MessageStatus.ACTIVE, True
                self.touch(record)
            record.implicit = False
        if event.name is not None and record.name != event.name:
            record.name = event.name
            self.touch(record)

    def _on_text_content(self, event: TextMessageContentEvent) -> None:
        record = self._text_target(event.message_id, event, "TEXT_MESSAGE_CONTENT")
        if event.delta and self.parts_tail != record.key:
            self.grow_segment("text", record)
        record.text.append(event.delta)
        self.touch(record, content=True)

    def _on_text_end(self, event: TextMessageEndEvent) -> None:
        record = self.find(event.message_id, Role.ASSISTANT)
        if record is None:
            self.warn(f"TEXT_MESSAGE_END for unknown message {event.message_id!r}; ignored")
            return
        record.implicit = False
        self.seal_segment("text", record)
        self.close(record)

    TEXT_HANDLERS: ClassVar[dict[str, Callable[[Any, Any], None]]] = {
        "TEXT_MESSAGE_START": _on_text_start,
        "TEXT_MESSAGE_CONTENT": _on_text_content,
        "TEXT_MESSAGE_CHUNK": _on_text_content,  # the delta of its run (codec.READING)
        "TEXT_MESSAGE_END": _on_text_end,
    }
