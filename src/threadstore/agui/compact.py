"""Compact a recorded AG-UI event stream into a shorter one with the same meaning.

This follows AG-UI's TypeScript ``compactEvents`` (``@ag-ui/client``): the deltas of one
streamed text message (TEXT_MESSAGE_CONTENT) or tool call (TOOL_CALL_ARGS) become a
single content event carrying their concatenation, between the stream's start and end.
REASONING_MESSAGE_CONTENT, which has the same start/content/end shape, is merged the
same way. Everything else passes through unchanged, as in TypeScript; that includes
STATE_SNAPSHOT / STATE_DELTA (merging patches is not equivalent: RFC 6902 applies a
patch atomically, so one failing operation would also undo the patches merged with it)
and the *_CHUNK events (their stream boundaries are implicit, defined by adjacency).

Where this differs from TypeScript, it is to stay safe on interleaved streams:

- TypeScript moves events found between a start and its end to after the end, to make
  each block contiguous. Here **no event other than a content delta ever moves**: the
  non-content events come out in their original order, as the same objects. Moving
  them is not equivalent in general (a tool call flushed ahead of its parent message's
  start, or a step boundary moved across records, changes what a fold records). For a
  stream that is not interleaved the output is the same as TypeScript's.
- A content delta moves earlier, joining the first delta of its run (its *segment*),
  only across events that cannot observe or change that stream's content or what is
  recorded with it: other streams' start/content/end events, tool results, encrypted
  values, state, activity, SUBAGENT_STARTED, CUSTOM and RAW events - and none of them
  may name the stream's id (as ``messageId``, ``toolCallId``, ``parentMessageId``,
  ``entityId`` or ``parentToolCallId``). Any other event ends every open segment: run
  boundaries, MESSAGES_SNAPSHOT (it rewrites message content), STEP_STARTED /
  STEP_FINISHED (a fold may record the step with what it writes), SUBAGENT_FINISHED /
  SUBAGENT_ERROR (they close the subagent's records), *_CHUNK events and event types
  this module does not know (legacy THINKING_* events included).
- Deltas merge only when they agree on ``subagentRunId``, ``metadata`` and any extra
  fields. The merged event is the segment's first event with the joined ``delta``: it
  keeps that event's ``timestamp`` and drops its ``rawEvent``, which described only the
  first fragment. A segment of one event is that event, untouched (an empty ``delta``
  included, as in TypeScript).

Hence each stream's content, read start to end, is unchanged; a merged delta stays
after its stream's start (its first fragment was) and before its end (the end names the
stream and closes its segment); and the stream validates whenever the input does.
The function is pure and runs in one pass, linear in the number of events.
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
)

__all__ = ["compact_events"]

_ContentEvent = TextMessageContentEvent | ToolCallArgsEvent | ReasoningMessageContentEvent

# Event types a content delta may move across (unless they name its stream's id).
_COMMUTING: frozenset[str] = frozenset(
    event_type.value
    for event_type in (
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
    for event in events:
        if isinstance(event, _ContentEvent):
            key = _stream_key(event)
            segment = open_segments.get(key)
            if segment is not None and _same_envelope(segment.first, event):
                segment.deltas.append(event.delta)
                continue
            segment = _Segment(first=event, deltas=[event.delta])
            open_segments[key] = segment
            out.append(segment)
            continue
        if open_segments:
            # Legacy event classes carry a plain string type, 1.0 ones an EventType.
            if getattr(event.type, "value", event.type) not in _COMMUTING:
                open_segments.clear()
            else:
                for name in _ID_FIELDS:
                    ref = getattr(event, name, None)
                    if isinstance(ref, str):
                        for kind in _KINDS:
                            open_segments.pop((kind, ref), None)
        out.append(event)
    return [item.event() if isinstance(item, _Segment) else item for item in out]
