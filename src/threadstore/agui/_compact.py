"""Compact a recorded AG-UI event stream into a shorter one with the same meaning.

As AG-UI's TypeScript ``compactEvents``: each stream's content deltas join into one
event, but no other event ever moves, so interleaved streams stay safe. Pure, one
pass. The rules are in docs/architecture.md, "Compacting a recorded stream".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ag_ui.core import (
    BaseEvent,
    EventType,
    ReasoningMessageContentEvent,
    TextMessageContentEvent,
    ToolCallArgsEvent,
    ToolCallStartEvent,
)

__all__ = ["compact_events"]

_ContentEvent = TextMessageContentEvent | ToolCallArgsEvent | ReasoningMessageContentEvent


def _type_names(*types: EventType) -> frozenset[str]:
    return frozenset(event_type.value for event_type in types)


# Event types a content delta may move across (unless they name its stream's id).
_COMMUTING = _type_names(
    EventType.TEXT_MESSAGE_START,
    EventType.TEXT_MESSAGE_END,
    EventType.TOOL_CALL_START,
    EventType.TOOL_CALL_END,
    EventType.TOOL_CALL_RESULT,
    EventType.REASONING_START,
    EventType.REASONING_END,
    EventType.REASONING_MESSAGE_START,
    EventType.REASONING_MESSAGE_END,
    EventType.REASONING_ENCRYPTED_VALUE,
    EventType.STATE_SNAPSHOT,
    EventType.STATE_DELTA,
    EventType.ACTIVITY_SNAPSHOT,
    EventType.ACTIVITY_DELTA,
    EventType.SUBAGENT_STARTED,
    EventType.CUSTOM,
    EventType.RAW,
)

# Events that list a new element in a message's parts order (docs/chat-engine.md): a
# text or reasoning delta after one starts a new part, so its segment ends there.
_OPENS_PART = _type_names(
    EventType.TOOL_CALL_START,
    EventType.REASONING_END,
    EventType.REASONING_ENCRYPTED_VALUE,
    EventType.ACTIVITY_SNAPSHOT,
    EventType.ACTIVITY_DELTA,
    EventType.CUSTOM,
)

_ID_FIELDS = ("message_id", "tool_call_id", "parent_message_id", "entity_id", "parent_tool_call_id")

# Text and reasoning messages share the message-id namespace, tool calls have their own;
# an id closes the streams of every kind that carry it, which is never wrong.
_KINDS = ("text", "tool", "reasoning")


@dataclass(slots=True)
class _Segment:
    """Consecutive deltas of one stream that merge into one event at the first's place."""

    first: _ContentEvent
    deltas: list[str] = field(default_factory=list)

    def event(self) -> BaseEvent:
        if len(self.deltas) == 1:
            return self.first
        return self.first.model_copy(update={"delta": "".join(self.deltas), "raw_event": None})


def _stream_key(event: _ContentEvent) -> tuple[str, str]:
    if isinstance(event, TextMessageContentEvent):
        return ("text", event.message_id)
    if isinstance(event, ToolCallArgsEvent):
        return ("tool", event.tool_call_id)
    return ("reasoning", event.message_id)


def _same_envelope(first: _ContentEvent, event: _ContentEvent) -> bool:
    return (
        first.subagent_run_id == event.subagent_run_id
        and first.metadata == event.metadata
        and first.model_extra == event.model_extra
    )


def compact_events(events: Sequence[BaseEvent]) -> list[BaseEvent]:
    """Return the minimal equivalent of ``events``: each run of stream deltas merged into one."""
    out: list[BaseEvent | _Segment] = []
    open_segments: dict[tuple[str, str], _Segment] = {}
    calls: set[str] = set()  # started tool calls: their arguments open no new part
    for event in events:
        if isinstance(event, _ContentEvent):
            key = _stream_key(event)
            if key[0] != "tool" or key[1] not in calls:
                _end_parts(open_segments, keep=key)  # another element opens between them
            segment = open_segments.get(key)
            if segment is not None and _same_envelope(segment.first, event):
                segment.deltas.append(event.delta)
                continue
            segment = _Segment(first=event, deltas=[event.delta])
            open_segments[key] = segment
            out.append(segment)
            continue
        if isinstance(event, ToolCallStartEvent):
            calls.add(event.tool_call_id)
        if open_segments:
            # Legacy event classes carry a plain string type, 1.0 ones an EventType.
            kind = getattr(event.type, "value", event.type)
            if kind not in _COMMUTING:
                open_segments.clear()
            elif kind in _OPENS_PART:
                _end_parts(open_segments)
            else:
                for name in _ID_FIELDS:
                    ref = getattr(event, name, None)
                    if isinstance(ref, str):
                        for kind in _KINDS:
                            open_segments.pop((kind, ref), None)
        out.append(event)
    return [item.event() if isinstance(item, _Segment) else item for item in out]


def _end_parts(
    open_segments: dict[tuple[str, str], _Segment], keep: tuple[str, str] = ("", "")
) -> None:
    """End the open text and reasoning segments (but ``keep``'s): their next delta is a new part."""
    for key in [k for k in open_segments if k[0] != "tool" and k != keep]:
        del open_segments[key]
