"""The one reading of an AG-UI stream: what each event opens, extends and closes.

AG-UI says one thing several ways. A run of ``*_CHUNK`` events is a message, tool call
or reasoning message whose start and end the client infers (a chunk naming a new id
starts one, any other event but ``RAW`` ends it), and the ``THINKING_*`` events of AG-UI
0.x are reasoning without ids. :class:`StreamReader` rewrites every such event into the
explicit ``START`` / ``CONTENT`` / ``END`` form, so what reads a stream (the storage
fold, the chat engine's reducer, the server's reconnect snapshot) reads only that form
and each of them is a projection of one reading. :data:`READING` then says, for every
explicit event type, which element it concerns and what it does to it.

A new event type is added here first: a new form of an existing element is a rewrite
in :class:`StreamReader`; a new element or act is a row of :data:`READING`, and the tests
require a rule for it in every projection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum, StrEnum
from typing import Any

from ag_ui import core as ag

from threadstore.codec import thinking

__all__ = ["READING", "Act", "Element", "StreamReader", "event_kind"]


class Element(StrEnum):
    """What an event concerns."""

    MESSAGE = "message"
    """A text message (any role), by ``message_id``."""
    TOOL_CALL = "tool_call"
    """A tool call, by ``tool_call_id``, in the message ``parent_message_id`` names."""
    TOOL_RESULT = "tool_result"
    """A tool call's result, a message of its own (``message_id``)."""
    REASONING = "reasoning"
    """A reasoning message, by ``message_id``."""
    REASONING_SPAN = "reasoning_span"
    """A block of reasoning messages, by ``message_id``."""
    ENCRYPTED_VALUE = "encrypted_value"
    """An opaque value for a reasoning message or tool call (``entity_id``)."""
    STEP = "step"
    """A named step of the run, by ``step_name``."""
    STATE = "state"
    """The run's shared state."""
    MESSAGES = "messages"
    """The whole conversation as the agent sees it."""
    ACTIVITY = "activity"
    """An activity message, by ``message_id`` and ``activity_type``."""
    CUSTOM = "custom"
    """An application's named value."""
    SUBAGENT = "subagent"
    """A sub-agent's part of the run, by ``subagent_run_id``."""
    RUN = "run"
    """The run itself."""


class Act(StrEnum):
    """What an event does to its element."""

    OPEN = "open"
    EXTEND = "extend"
    """Appends a delta (``delta``) to the open element."""
    CLOSE = "close"
    SET = "set"
    """Gives the element whole (a snapshot, a result, a value)."""
    PATCH = "patch"
    """Changes the element by a JSON Patch."""


READING: dict[str, tuple[Element, Act]] = {
    "TEXT_MESSAGE_START": (Element.MESSAGE, Act.OPEN),
    "TEXT_MESSAGE_CONTENT": (Element.MESSAGE, Act.EXTEND),
    "TEXT_MESSAGE_END": (Element.MESSAGE, Act.CLOSE),
    "TEXT_MESSAGE_CHUNK": (Element.MESSAGE, Act.EXTEND),
    "TOOL_CALL_START": (Element.TOOL_CALL, Act.OPEN),
    "TOOL_CALL_ARGS": (Element.TOOL_CALL, Act.EXTEND),
    "TOOL_CALL_END": (Element.TOOL_CALL, Act.CLOSE),
    "TOOL_CALL_CHUNK": (Element.TOOL_CALL, Act.EXTEND),
    "TOOL_CALL_RESULT": (Element.TOOL_RESULT, Act.SET),
    "REASONING_START": (Element.REASONING_SPAN, Act.OPEN),
    "REASONING_MESSAGE_START": (Element.REASONING, Act.OPEN),
    "REASONING_MESSAGE_CONTENT": (Element.REASONING, Act.EXTEND),
    "REASONING_MESSAGE_END": (Element.REASONING, Act.CLOSE),
    "REASONING_MESSAGE_CHUNK": (Element.REASONING, Act.EXTEND),
    "REASONING_END": (Element.REASONING_SPAN, Act.CLOSE),
    "REASONING_ENCRYPTED_VALUE": (Element.ENCRYPTED_VALUE, Act.SET),
    "STEP_STARTED": (Element.STEP, Act.OPEN),
    "STEP_FINISHED": (Element.STEP, Act.CLOSE),
    "STATE_SNAPSHOT": (Element.STATE, Act.SET),
    "STATE_DELTA": (Element.STATE, Act.PATCH),
    "MESSAGES_SNAPSHOT": (Element.MESSAGES, Act.SET),
    "ACTIVITY_SNAPSHOT": (Element.ACTIVITY, Act.SET),
    "ACTIVITY_DELTA": (Element.ACTIVITY, Act.PATCH),
    "CUSTOM": (Element.CUSTOM, Act.SET),
    "SUBAGENT_STARTED": (Element.SUBAGENT, Act.OPEN),
    "SUBAGENT_FINISHED": (Element.SUBAGENT, Act.CLOSE),
    "SUBAGENT_ERROR": (Element.SUBAGENT, Act.CLOSE),
    "RUN_STARTED": (Element.RUN, Act.OPEN),
    "RUN_FINISHED": (Element.RUN, Act.CLOSE),
    "RUN_ERROR": (Element.RUN, Act.CLOSE),
}
"""What every event type the reading lets through concerns and does. A ``*_CHUNK`` event
comes through only as the delta of the run of chunks it continues, which it names, so it
extends as the ``CONTENT`` (``ARGS``) event of its element does; a chunk that starts a
run, or names none, comes through as the explicit events it stands for. ``RAW`` and
types not listed concern nothing of the conversation."""


def event_kind(event: ag.BaseEvent) -> str:
    """An event's wire type (``"TEXT_MESSAGE_START"``...), whether an enum or a string."""
    kind: Any = event.type
    return str(kind.value) if isinstance(kind, Enum) else str(kind)


@dataclass(frozen=True, slots=True)
class _Chunked:
    """The element a run of chunk events extends."""

    id: str
    subagent_run_id: str | None


_NOTHING_OPEN: tuple[_Chunked | None, _Chunked | None, _Chunked | None] = (None, None, None)


@dataclass(frozen=True, slots=True)
class StreamReader:
    """What a stream has left open that the meaning of its next events depends on.

    Immutable: :meth:`read` returns the reader after the event, so a pure fold (the
    chat engine's) keeps it in its own value and a mutable one (the storage fold) keeps
    the latest. Start one per run; ``run_id`` names the ids it makes up.
    """

    run_id: str = ""
    chunks: tuple[_Chunked | None, _Chunked | None, _Chunked | None] = _NOTHING_OPEN
    """The open run of text, tool call and reasoning chunks."""
    made_up: int = 0
    """Ids made up so far (for THINKING_* events and chunks that name none)."""
    thinking_span: str | None = None
    thinking_message: str | None = None
    warning: str | None = None
    """What was wrong with the event just read (a chunk that names nothing), if anything."""

    def passes(self, event: ag.BaseEvent) -> bool:
        """Whether ``event`` reads as itself and leaves the reader as it is: most events,
        and a chunk that continues the only run open. :meth:`read` is its oracle."""
        kind = type(event)
        if self.chunks is _NOTHING_OPEN and self.warning is None:
            return kind not in _READ  # (no chunk passes with no run open)
        chunk = _CHUNKS.get(kind)
        if chunk is None or self.warning is not None:
            return False
        slot, field, _ = chunk
        current = self.chunks[slot]
        return (
            current is not None
            and getattr(event, field) == current.id
            and bool(event.delta)  # type: ignore[attr-defined]
            and sum(open_ is not None for open_ in self.chunks) == 1
        )

    def read(self, event: ag.BaseEvent) -> tuple[StreamReader, tuple[ag.BaseEvent, ...]]:
        """The events ``event`` stands for (:data:`READING`), and the reader after it."""
        if self.warning is not None:
            self = replace(self, warning=None)
        rewrite = _REWRITES.get(type(event))
        if rewrite is not None:
            return rewrite(self, event)
        if self.chunks is _NOTHING_OPEN or event_kind(event) not in READING:
            if type(event) is ag.RunStartedEvent:
                return StreamReader(event.run_id), (event,)
            return self, (event,)
        # Any other event of the conversation ends the chunk runs.
        reader, ends = self.close()
        if type(event) is ag.RunStartedEvent:
            reader = StreamReader(event.run_id)
        return reader, (*ends, event)

    def close(self) -> tuple[StreamReader, tuple[ag.BaseEvent, ...]]:
        """The ends of the chunk runs still open (the stream ended), and the reader after."""
        if self.chunks is _NOTHING_OPEN:
            return self, ()
        ends = tuple(
            end(open_.id, open_.subagent_run_id)
            for open_, end in zip(self.chunks, _ENDS, strict=True)
            if open_ is not None
        )
        return replace(self, chunks=_NOTHING_OPEN), ends

    def _made_up(self, what: str) -> tuple[StreamReader, str]:
        count = self.made_up + 1
        return replace(self, made_up=count), f"{what}-{self.run_id}-{count}"

    # --- chunks ----------------------------------------------------------------------

    def _chunk(self, event: Any) -> tuple[StreamReader, tuple[ag.BaseEvent, ...]]:
        """A chunk: the delta of the run it continues, or the start of a run (ending the
        one open); either way every run of other chunks ends."""
        slot, field, what = _CHUNKS[type(event)]
        named: str | None = getattr(event, field)
        current = self.chunks[slot]
        if current is not None and named in (None, current.id):
            reader, out = self._closed_but(slot)
            if not event.delta:
                return reader, out
            if named is not None:  # it names the run it continues: its delta as it is
                return reader, (*out, event)
            return reader, (*out, _DELTA[slot](current.id, event))
        reader, out = self.close()
        if named is None:
            kind = type(event).__name__.removesuffix("ChunkEvent")
            if what == "tool":  # a call's name and place cannot be made up
                warning = f"{kind} chunk without a tool call id and no open call; ignored"
                return replace(reader, warning=warning), out
            reader, named = reader._made_up(what)
            warning = f"{kind} chunk without an id and no open run; named {named!r}"
            reader = replace(reader, warning=warning)
        chunks = list(reader.chunks)
        chunks[slot] = _Chunked(named, event.subagent_run_id)
        reader = replace(reader, chunks=(chunks[0], chunks[1], chunks[2]))
        out = (*out, _START[slot](named, event))
        return reader, (*out, _DELTA[slot](named, event)) if event.delta else out

    def _closed_but(self, slot: int) -> tuple[StreamReader, tuple[ag.BaseEvent, ...]]:
        """The reader with every chunk run but ``slot``'s ended, and their ends."""
        if all(open_ is None for i, open_ in enumerate(self.chunks) if i != slot):
            return self, ()
        kept = tuple(open_ if i == slot else None for i, open_ in enumerate(self.chunks))
        ends = tuple(
            _ENDS[i](open_.id, open_.subagent_run_id)
            for i, open_ in enumerate(self.chunks)
            if i != slot and open_ is not None
        )
        return replace(self, chunks=(kept[0], kept[1], kept[2])), ends

    # --- THINKING_* ------------------------------------------------------------------

    def _thinking(self, event: Any) -> tuple[StreamReader, tuple[ag.BaseEvent, ...]]:
        reader, ends = self.close()
        kind = type(event)
        if kind is thinking.ThinkingStartEvent:
            reader, span = reader._made_up("thinking")
            reader = replace(reader, thinking_span=span)
            return reader, (*ends, thinking.to_reasoning_event(event, span))
        if kind is thinking.ThinkingEndEvent:
            if reader.thinking_span is None:
                reader, span = reader._made_up("thinking")
            else:
                span = reader.thinking_span
            return replace(reader, thinking_span=None), (
                *ends,
                thinking.to_reasoning_event(event, span),
            )
        if reader.thinking_message is None or kind is thinking.ThinkingTextMessageStartEvent:
            reader, message_id = reader._made_up("thinking")
        else:
            message_id = reader.thinking_message
        ending = kind is thinking.ThinkingTextMessageEndEvent
        reader = replace(reader, thinking_message=None if ending else message_id)
        return reader, (*ends, thinking.to_reasoning_event(event, message_id))


def _carried(event: Any) -> dict[str, Any]:
    """The fields a rewritten event keeps from the event it stands for."""
    return {
        "timestamp": event.timestamp,
        "raw_event": event.raw_event,
        "metadata": event.metadata,
        "subagent_run_id": event.subagent_run_id,
    }


def _text_start(message_id: str, chunk: Any) -> ag.BaseEvent:
    role, name = chunk.role or "assistant", chunk.name
    return ag.TextMessageStartEvent(message_id=message_id, role=role, name=name, **_carried(chunk))


def _tool_start(tool_call_id: str, chunk: Any) -> ag.BaseEvent:
    return ag.ToolCallStartEvent(
        tool_call_id=tool_call_id,
        tool_call_name=chunk.tool_call_name or "",
        parent_message_id=chunk.parent_message_id,
        **_carried(chunk),
    )


def _reasoning_start(message_id: str, chunk: Any) -> ag.BaseEvent:
    return ag.ReasoningMessageStartEvent(message_id=message_id, **_carried(chunk))


def _text_delta(message_id: str, chunk: Any) -> ag.BaseEvent:
    return ag.TextMessageContentEvent(message_id=message_id, delta=chunk.delta, **_carried(chunk))


def _tool_delta(tool_call_id: str, chunk: Any) -> ag.BaseEvent:
    return ag.ToolCallArgsEvent(tool_call_id=tool_call_id, delta=chunk.delta, **_carried(chunk))


def _reasoning_delta(message_id: str, chunk: Any) -> ag.BaseEvent:
    return ag.ReasoningMessageContentEvent(
        message_id=message_id, delta=chunk.delta, **_carried(chunk)
    )


def _text_end(message_id: str, subagent_run_id: str | None) -> ag.BaseEvent:
    return ag.TextMessageEndEvent(message_id=message_id, subagent_run_id=subagent_run_id)


def _tool_end(tool_call_id: str, subagent_run_id: str | None) -> ag.BaseEvent:
    return ag.ToolCallEndEvent(tool_call_id=tool_call_id, subagent_run_id=subagent_run_id)


def _reasoning_end(message_id: str, subagent_run_id: str | None) -> ag.BaseEvent:
    return ag.ReasoningMessageEndEvent(message_id=message_id, subagent_run_id=subagent_run_id)


_CHUNKS: dict[type, tuple[int, str, str]] = {
    ag.TextMessageChunkEvent: (0, "message_id", "text"),
    ag.ToolCallChunkEvent: (1, "tool_call_id", "tool"),
    ag.ReasoningMessageChunkEvent: (2, "message_id", "reasoning"),
}
"""Each chunk event's slot in :attr:`StreamReader.chunks`, the field naming its run, and
the word for it in ids made up."""

_START = (_text_start, _tool_start, _reasoning_start)
_DELTA = (_text_delta, _tool_delta, _reasoning_delta)
_ENDS = (_text_end, _tool_end, _reasoning_end)
"""How each kind of chunk run starts, grows and ends, in slot order."""


_REWRITES: dict[
    type, Callable[[StreamReader, Any], tuple[StreamReader, tuple[ag.BaseEvent, ...]]]
] = {
    ag.TextMessageChunkEvent: StreamReader._chunk,
    ag.ToolCallChunkEvent: StreamReader._chunk,
    ag.ReasoningMessageChunkEvent: StreamReader._chunk,
    thinking.ThinkingStartEvent: StreamReader._thinking,
    thinking.ThinkingEndEvent: StreamReader._thinking,
    thinking.ThinkingTextMessageStartEvent: StreamReader._thinking,
    thinking.ThinkingTextMessageContentEvent: StreamReader._thinking,
    thinking.ThinkingTextMessageEndEvent: StreamReader._thinking,
}
"""The events written another way, and how each is rewritten."""

_READ = frozenset((*_REWRITES, ag.RunStartedEvent))
"""The events whose reading depends on, or changes, the reader whatever it holds."""
