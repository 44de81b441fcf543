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
from threadstore.fold._table import Handler, RecordTable
from threadstore.models import Role

__all__ = ["HANDLERS", "open_reasoning"]


def open_reasoning(
    fold: RecordTable, agui_id: str | None, event: BaseEvent | None, *, nested: bool = True
) -> FoldRecord:
    """Open a reasoning step (nested, or in a reasoning message of its own); return it."""
    if nested:
        message = fold.reasoning_holder(event)
        step_agui_id = agui_id
    else:
        message, _ = fold.message_for(agui_id, Role.REASONING, event)
        step_agui_id = message.agui_id
    step_key = f"r:{agui_id}" if agui_id is not None else f"r#{next(fold._anonymous)}"
    step = fold.open_record(
        RecordKind.REASONING, step_key, event, agui_id=step_agui_id, parent_key=message.key
    )
    if fold._span is not None:
        fold._spans[fold._span].append(step.key)
        step.name = fold._span_title
        if fold._span != agui_id:
            step.metadata["reasoning_span_id"] = fold._span
    return step


def _on_reasoning_start(fold: RecordTable, event: ReasoningStartEvent) -> None:
    fold._span = event.message_id
    fold._spans.setdefault(event.message_id, [])
    title = (event.metadata or {}).get(THINKING_TITLE_METADATA_KEY)
    fold._span_title = title if isinstance(title, str) else None


def _on_reasoning_message_start(fold: RecordTable, event: ReasoningMessageStartEvent) -> None:
    if fold.reasoning(event.message_id) is not None:
        fold.warn(f"REASONING_MESSAGE_START repeated for {event.message_id!r}")
        return
    open_reasoning(fold, event.message_id, event)


def _on_reasoning_content(fold: RecordTable, event: ReasoningMessageContentEvent) -> None:
    agui_id = event.message_id
    step = fold.reasoning(agui_id)
    if step is None:
        fold.warn(
            f"REASONING_MESSAGE_CONTENT for unknown reasoning message {agui_id!r}; it was opened"
        )
        step = open_reasoning(fold, agui_id, event)
    if event.delta:
        fold.grow_segment("reasoning", step)
        fold.extend(step, event.delta)


def _on_reasoning_message_end(fold: RecordTable, event: ReasoningMessageEndEvent) -> None:
    agui_id = event.message_id
    step = fold.known(fold.reasoning(agui_id), "REASONING_MESSAGE_END", "message", agui_id)
    if step is not None:
        fold.seal_segment("reasoning", step)
        fold.close(step)


def _on_reasoning_end(fold: RecordTable, event: ReasoningEndEvent) -> None:
    fold.seal_segment("reasoning")
    keys = fold._spans.pop(event.message_id, None)
    if keys is None:
        fold.warn(f"REASONING_END for unknown reasoning span {event.message_id!r}; ignored")
        return
    if fold._span == event.message_id:
        fold._span = fold._span_title = None
    for key in keys:
        fold.close(fold.records[key])


def _on_encrypted_value(fold: RecordTable, event: ReasoningEncryptedValueEvent) -> None:
    entity, value = event.entity_id, event.encrypted_value
    if event.subtype == "tool-call":
        call = fold.tool_call(entity)
        if call is None or not call.owned:
            fold.warn(f"encrypted value for unknown tool call {entity!r}; ignored")
            return
        call.metadata["encrypted_value"] = value
        fold.touch(call)
        return
    target = fold.reasoning(entity) or fold.message(entity)
    if target is None and entity != fold._span:
        if fold.agent_message(getattr(event, "subagent_run_id", None)) is None:
            # Nothing to attach it to: an opaque value alone is not a conversation.
            fold.warn(f"encrypted value for unknown message {entity!r} with no message; ignored")
            return
        fold.warn(f"encrypted value for unknown message {entity!r}; opened as reasoning")
    if target is None:
        target = open_reasoning(fold, entity, event)
    target.encrypted_value = value
    fold.touch(target)
    if target.subagent_run_id is None and target.kind is RecordKind.REASONING:
        fold.add_part(target, {"type": "reasoning", "encrypted": True})


HANDLERS: dict[str, Handler] = {
    "REASONING_START": _on_reasoning_start,
    "REASONING_MESSAGE_START": _on_reasoning_message_start,
    "REASONING_MESSAGE_CONTENT": _on_reasoning_content,
    "REASONING_MESSAGE_CHUNK": _on_reasoning_content,  # the delta of its run (READING)
    "REASONING_MESSAGE_END": _on_reasoning_message_end,
    "REASONING_END": _on_reasoning_end,
    "REASONING_ENCRYPTED_VALUE": _on_encrypted_value,
}
