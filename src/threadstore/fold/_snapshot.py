"""MESSAGES_SNAPSHOT: store the messages of a snapshot that are not known yet, as complete.

Messages already known (stored in the chat, or produced by this run) are never
rewritten: the store is the source of truth. A tool message answers its call if that
call has no result yet.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, ClassVar
from uuid import UUID

from ag_ui.core import ActivityMessage as AguiActivityMessage
from ag_ui.core import (
    AssistantMessage,
    DeveloperMessage,
    MessagesSnapshotEvent,
    ReasoningMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)

from threadstore.codec import AGUI_METADATA_KEY, message_create_from_agui
from threadstore.errors import InvalidInputError
from threadstore.fold._reasoning import ReasoningFolding
from threadstore.fold._records import FoldRecord, RecordKind
from threadstore.fold._tools import ToolFolding
from threadstore.models import Role

__all__ = ["SnapshotFolding"]


class SnapshotFolding(ToolFolding, ReasoningFolding):
    """Folds MESSAGES_SNAPSHOT into complete records of the messages not known yet."""

    def _on_messages_snapshot(self, event: MessagesSnapshotEvent) -> None:
        for message in event.messages:
            if message.id in self.known_ids:
                continue
            if isinstance(message, ToolMessage):
                self._snapshot_tool_result(message)
                continue
            self._snapshot_message(message)

    def _snapshot_tool_result(self, message: ToolMessage) -> None:
        call = self.tool_call(message.tool_call_id) or self.adopt_call(message.tool_call_id)
        if call is None or call.result_message_id is not None:
            self.warn(f"snapshot tool message {message.id!r} answers no pending call; skipped")
            return
        self.set_result(call, message.content, message.id)

    def _snapshot_message(self, message: Any) -> None:
        if isinstance(message, ReasoningMessage):
            step = self.open_reasoning(message.id, None, nested=False)
            step.text.replace(message.content)
            step.encrypted_value = message.encrypted_value
            self.close(step)
            return
        record, _ = self.message_for(message.id, Role(message.role), None)
        if message.subagent_run_id is not None:
            record.metadata["subagent_run_id"] = message.subagent_run_id
        if message.metadata:
            record.metadata[AGUI_METADATA_KEY] = message.metadata
        if isinstance(message, AguiActivityMessage):
            record.activity_type = message.activity_type
            record.activity_content = copy.deepcopy(message.content)
        elif isinstance(message, UserMessage | SystemMessage | DeveloperMessage):
            try:
                create = message_create_from_agui(message, UUID(int=0), self.run_id)
            except InvalidInputError as exc:
                self.warn(f"snapshot message {message.id!r}: {exc}; stored as text only")
                create = None
            if create is not None:
                record.text.replace(create.content)
                record.content_parts = create.content_parts
            record.name, record.encrypted_value = message.name, message.encrypted_value
        elif isinstance(message, AssistantMessage):
            record.text.replace(message.content or "")
            record.name, record.encrypted_value = message.name, message.encrypted_value
            self._snapshot_calls(record, message)
        self.close(record)

    def _snapshot_calls(self, record: FoldRecord, message: AssistantMessage) -> None:
        for call in message.tool_calls or ():
            if call.id in self.known_ids:
                continue
            child = self.open_record(
                RecordKind.TOOL_CALL, f"t:{call.id}", None, agui_id=call.id, parent_key=record.key
            )
            child.name = call.function.name
            child.text.replace(call.function.arguments)
            if call.encrypted_value is not None:
                child.metadata["encrypted_value"] = call.encrypted_value
            self.close(child)

    SNAPSHOT_HANDLERS: ClassVar[dict[str, Callable[[Any, Any], None]]] = {
        "MESSAGES_SNAPSHOT": _on_messages_snapshot,
    }
