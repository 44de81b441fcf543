"""Reasoning: REASONING_* events (and THINKING_*, translated first) and encrypted values.

A reasoning message becomes a reasoning step nested in the assistant message of its
turn: the agent's active assistant message when one is streaming, else a message
opened to hold it that the next assistant message of the stream then takes as its own
(its AG-UI id, text and tool calls), so reasoning that comes before any text belongs
to the answer it precedes. The step carries the text, the encrypted value and, as
``name``, the title of the span (REASONING_START ... REASONING_END) it is in. The
span's end closes its steps. An encrypted value for no known step, message or span,
in a run that has opened no message of the agent's, is not stored (as the seed layer).
A MESSAGES_SNAPSHOT's reasoning message stays a message of role ``reasoning``, as the
snapshot lists it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from ag_ui.core import (
    BaseEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
)

from threadstore.codec.thinking import THINKING_TITLE_METADATA_KEY
from threadstore.fold._records import FoldRecord, RecordKind
from threadstore.fold._table import RecordTable
from threadstore.models import Role

__all__ = ["ReasoningFolding"]


class ReasoningFolding(RecordTable):
    """Folds reasoning events onto reasoning messages and their steps, grouped in spans."""

    def __init__(self, run_id: str, **kwargs: Any) -> None:
        super().__init__(run_id, **kwargs)
        self._span: str | None = None
        self._spans: dict[str, list[str]] = {}
        self._span_title: str | None = None

    def open_reasoning(
        self, agui_id: str | None, event: BaseEvent | None, *, nested: bool = True
    ) -> FoldRecord:
        """Open a reasoning step (nested, or in a reasoning message of its own); return it."""
        if nested:
            message = self.reasoning_holder(event)
            step_agui_id = agui_id
        else:
            message, _ = self.message_for(agui_id, Role.REASONING, event)
            step_agui_id = message.agui_id
        step_key = f"r:{agui_id}" if agui_id is not None else f"r#{next(self._anonymous)}"
        step = self.open_record(
            RecordKind.REASONING, step_key, event, agui_id=step_agui_id, parent_key=message.key
        )
        if self._span is not None:
            self._spans[self._span].append(step.key)
            step.name = self._span_title
            if self._span != agui_id:
                step.metadata["reasoning_span_id"] = self._span
        return step

    def _reasoning_target(self, agui_id: str, event: BaseEvent, what: str) -> FoldRecord:
        step = self.reasoning(agui_id)
        if step is None:
            self.warn(f"{what} for unknown reasoning message {agui_id!r}; it was opened")
            step = self.open_reasoning(agui_id, event)
        return step

    def _append_reasoning(self, step: FoldRecord, delta: str | None) -> None:
        if delta:
            if self.parts_tail != step.key:
                self.grow_segment("reasoning", step)
            step.text.append(delta)
            self.touch(step, content=True)

    def _on_reasoning_start(self, event: ReasoningStartEvent) -> None:
        self._span = event.message_id
        self._spans.setdefault(event.message_id, [])
        title = (event.metadata or {}).get(THINKING_TITLE_METADATA_KEY)
        self._span_title = title if isinstance(title, str) else None

    def _on_reasoning_message_start(self, event: ReasoningMessageStartEvent) -> None:
        if self.reasoning(event.message_id) is not None:
            self.warn(f"REASONING_MESSAGE_START repeated for {event.message_id!r}")
            return
        self.open_reasoning(event.message_id, event)

    def _on_reasoning_content(self, event: ReasoningMessageContentEvent) -> None:
        step = self._reasoning_target(event.message_id, event, "REASONING_MESSAGE_CONTENT")
        self._append_reasoning(step, event.delta)

    def _on_reasoning_message_end(self, event: ReasoningMessageEndEvent) -> None:
        step = self.reasoning(event.message_id)
        if step is None:
            self.warn(f"REASONING_MESSAGE_END for unknown message {event.message_id!r}; ignored")
            return
        self.seal_segment("reasoning", step)
        self.close(step)

    def _on_reasoning_end(self, event: ReasoningEndEvent) -> None:
        self.seal_segment("reasoning")
        keys = self._spans.pop(event.message_id, None)
        if keys is None:
            self.warn(f"REASONING_END for unknown reasoning span {event.message_id!r}; ignored")
            return
        if self._span == event.message_id:
            self._span = self._span_title = None
        for key in keys:
            self.close(self.records[key])

    def _on_encrypted_value(self, event: ReasoningEncryptedValueEvent) -> None:
        entity, value = event.entity_id, event.encrypted_value
        if event.subtype == "tool-call":
            call = self.tool_call(entity)
            if call is None or not call.owned:
                self.warn(f"encrypted value for unknown tool call {entity!r}; ignored")
                return
            call.metadata["encrypted_value"] = value
            self.touch(call)
            return
        target = self.reasoning(entity) or self.message(entity)
        if target is None and entity != self._span:
            if self.agent_message(getattr(event, "subagent_run_id", None)) is None:
                # Nothing to attach it to: an opaque value alone is not a conversation.
                self.warn(
                    f"encrypted value for unknown message {entity!r} with no message; ignored"
                )
                return
            self.warn(f"encrypted value for unknown message {entity!r}; opened as reasoning")
        if target is None:
            target = self.open_reasoning(entity, event)
        target.encrypted_value = value
        self.touch(target)
        if target.subagent_run_id is None and target.kind is RecordKind.REASONING:
            self.add_part(target, {"type": "reasoning", "encrypted": True})

    REASONING_HANDLERS: ClassVar[dict[str, Callable[[Any, Any], None]]] = {
        "REASONING_START": _on_reasoning_start,
        "REASONING_MESSAGE_START": _on_reasoning_message_start,
        "REASONING_MESSAGE_CONTENT": _on_reasoning_content,
        "REASONING_MESSAGE_CHUNK": _on_reasoning_content,  # the delta of its run (READING)
        "REASONING_MESSAGE_END": _on_reasoning_message_end,
        "REASONING_END": _on_reasoning_end,
        "REASONING_ENCRYPTED_VALUE": _on_encrypted_value,
    }
