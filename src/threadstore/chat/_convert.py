"""UI messages <-> canonical history: AG-UI messages, or threadstore's stored messages.

- :func:`assistant_message_from_turn`: the turn as one AG-UI assistant message (its
  text and tool calls, exactly as streamed; nothing invented).
- :func:`tool_result_message`: AG-UI tool messages for client-executed calls.
- :func:`ui_from_messages`: a history into :class:`UIMessage` s with ordered parts.
- :func:`canonical_from_ui`: the inverse, lossy only where docs/chat-engine.md says.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import ag_ui.core as ag

from threadstore.chat._types import (
    AssistantTurn,
    CitationPart,
    DataPart,
    FilePart,
    ReasoningPart,
    StepStartPart,
    TextPart,
    ToolPart,
    UIMessage,
    UIMessagePart,
    UIToolCall,
    assistant_ui_message,
    parse_arguments,
    with_result,
)
from threadstore.codec import SUBAGENT_METADATA_KEY
from threadstore.models import PARTS_METADATA_KEY, MediaPart, Role
from threadstore.models import Message as StoredMessage

__all__ = [
    "HistoryMessage",
    "assistant_message_from_turn",
    "canonical_from_ui",
    "tool_result_message",
    "tool_result_message_id",
    "ui_from_messages",
]

HistoryMessage: TypeAlias = ag.Message | StoredMessage
"""What :func:`ui_from_messages` reads: an AG-UI message or a stored threadstore message."""

_MEDIA_PARTS: dict[str, type[ag.ImagePart | ag.AudioPart | ag.VideoPart | ag.DocumentPart]] = {
    "image": ag.ImagePart,
    "audio": ag.AudioPart,
    "video": ag.VideoPart,
}


def tool_result_message_id(tool_call_id: str) -> str:
    """The id given to the tool message carrying ``tool_call_id``'s result."""
    return f"{tool_call_id}-result"


# --- turn -> canonical -----------------------------------------------------------------


def _agui_tool_call(call: UIToolCall) -> ag.ToolCall:
    return ag.ToolCall(
        id=call.tool_call_id,
        function=ag.FunctionCall(name=call.tool_name, arguments=call.arguments),
        encrypted_value=call.encrypted_value,
        metadata=call.metadata,
    )


def assistant_message_from_turn(turn: AssistantTurn) -> ag.AssistantMessage:
    """The canonical AG-UI assistant message of a turn: its text and its tool calls.

    This is the bucket view (one message). To keep the order of text around tool
    calls, convert ``[turn.message]`` with :func:`canonical_from_ui` instead.
    """
    message = turn.message
    calls = [_agui_tool_call(call) for call in message.tool_calls or ()]
    return ag.AssistantMessage(
        id=message.id, content=message.content or None, tool_calls=calls or None
    )


def tool_result_message(results: Iterable[UIToolCall]) -> list[ag.ToolMessage]:
    """AG-UI tool messages for calls the client executed (each with its ``output`` set)."""
    return [_tool_message(call) for call in results]


def _tool_message(call: UIToolCall) -> ag.ToolMessage:
    output = call.output
    content: Any = output if isinstance(output, str | list) else json.dumps(output)
    error = (content if isinstance(content, str) else json.dumps(output)) if call.is_error else None
    return ag.ToolMessage(
        id=tool_result_message_id(call.tool_call_id),
        content=content,
        tool_call_id=call.tool_call_id,
        error=error,
    )


# --- canonical -> UI -----------------------------------------------------------------


@dataclass
class _Turn:
    """The assistant UI message being assembled from consecutive canonical messages."""

    run: str | None
    id: str | None = None
    """The turn's first assistant message id."""
    first_id: str | None = None
    """The id of its first message of any kind (for a turn with no assistant message)."""
    parts: list[tuple[int, UIMessagePart]] = field(default_factory=list)
    """Parts with their place: a stored parts order's position, else the last place seen."""
    calls: dict[str, UIToolCall] = field(default_factory=dict)
    last: str = ""
    place: int = -1

    def add(self, part: UIMessagePart, place: int | None = None) -> None:
        """Add a part at ``place`` (a stored position), or after what came before."""
        if place is not None:
            self.place = max(self.place, place)
        self.parts.append((self.place if place is None else place, part))

    def ordered_parts(self) -> list[UIMessagePart]:
        """The parts by place; parts of equal place keep the order they came in."""
        return [part for _, part in sorted(self.parts, key=lambda item: item[0])]


class _UIBuilder:
    """Groups a history into UI messages (one per user message, one per assistant turn)."""

    def __init__(self) -> None:
        self.out: list[UIMessage] = []
        self.turn: _Turn | None = None

    def flush(self) -> None:
        turn, self.turn = self.turn, None
        id = turn.id or turn.first_id if turn is not None else None
        if turn is not None and id is not None:
            parts = turn.ordered_parts()
            # The calls follow their tool parts, as a live turn lists them.
            placed = [p.tool_call_id for p in parts if isinstance(p, ToolPart)]
            order = {call_id: n for n, call_id in enumerate(placed)}
            calls = sorted(turn.calls.values(), key=lambda c: order.get(c.tool_call_id, len(order)))
            self.out.append(assistant_ui_message(id, parts, calls))

    def user(self, message: UIMessage) -> None:
        self.flush()
        self.out.append(message)

    def assistant_side(
        self, message: ag.Message, run: str | None, *, with_parts: bool = True
    ) -> _Turn | None:
        """Add an AG-UI message to the turn (its parts too, unless a parts order gives them)."""
        turn = self.turn
        if turn is not None and message.role != "tool" and _new_turn(turn, message.role, run):
            self.flush()
            turn = None
        if turn is None:
            if message.role == "tool":
                return None  # a result with no call before it: nothing to merge it into
            turn = self.turn = _Turn(run=run, first_id=message.id)
        if isinstance(message, ag.AssistantMessage):
            _add_assistant(turn, message, with_parts)
        elif isinstance(message, ag.ReasoningMessage):
            if with_parts:
                _add_reasoning(turn, message)
        elif isinstance(message, ag.ToolMessage):
            _add_result(turn, message)
        elif isinstance(message, ag.ActivityMessage) and with_parts:
            turn.add(DataPart(name=message.activity_type, id=message.id, payload=message.content))
        turn.last = message.role
        return turn


def _new_turn(turn: _Turn, role: str, run: str | None) -> bool:
    """Whether ``role`` starts a new assistant turn after what ``turn`` holds so far."""
    if turn.run is not None and run is not None:
        return run != turn.run  # stored history: one run, one turn
    # Without run ids, a step is continued only after its tool results (or reasoning).
    return role != "activity" and turn.last == "assistant"


def _add_reasoning(turn: _Turn, message: ag.ReasoningMessage) -> None:
    if message.content:
        turn.add(ReasoningPart(text=message.content))
    if message.encrypted_value:
        turn.add(ReasoningPart(text=message.encrypted_value, encrypted=True))


def _add_assistant(turn: _Turn, message: ag.AssistantMessage, with_parts: bool = True) -> None:
    turn.id = turn.id or message.id
    if message.content and with_parts:
        turn.add(TextPart(text=message.content))
    for call in message.tool_calls or ():
        arguments = call.function.arguments
        turn.calls[call.id] = UIToolCall(
            tool_call_id=call.id,
            tool_name=call.function.name,
            input=parse_arguments(arguments),
            arguments=arguments,
            encrypted_value=call.encrypted_value,
            metadata=call.metadata,
        )
        if with_parts:
            turn.add(ToolPart(tool_call_id=call.id))


def _add_result(turn: _Turn, message: ag.ToolMessage) -> None:
    call = turn.calls.get(message.tool_call_id)
    if call is None:
        return
    is_error = True if message.error is not None else None
    turn.calls[call.tool_call_id] = with_result(call, message.content, is_error=is_error)


def _user_ui(id: str, content: str | list[Any], file: Callable[[Any], FilePart]) -> UIMessage:
    """A user UI message of its text, or of its parts (AG-UI's or stored: ``file`` reads those)."""
    if isinstance(content, str):
        parts: list[TextPart | FilePart] = [TextPart(text=content)] if content else []
    else:
        parts = [TextPart(text=p.text) if p.type == "text" else file(p) for p in content]
    text = "".join(part.text for part in parts if isinstance(part, TextPart))
    return UIMessage(id=id, role="user", content=text, parts=tuple(parts) or None)


def _renderable(value: str) -> str | None:
    return value if value.startswith(("http://", "https://", "data:")) else None


def _file_from_agui(part: Any) -> FilePart:
    source = part.source
    media_type = source.mime_type or ""
    url = _renderable(source.value) if source.type == "url" else None
    return FilePart(
        media_type=media_type, data=source.value, url=url, source=source.type, kind=part.type
    )


def _file_from_stored(part: MediaPart) -> FilePart:
    data: bytes | str = (
        part.data if part.source == "data" and part.data is not None else part.value or ""
    )
    url = _renderable(data) if isinstance(data, str) and part.source == "url" else None
    return FilePart(
        media_type=part.mime_type or "", data=data, url=url, source=part.source, kind=part.type
    )


def _agui_from_stored(message: StoredMessage, id: str) -> list[ag.Message]:
    """A stored assistant-side message as AG-UI messages, in bucket order."""
    if message.role == Role.ACTIVITY:
        content = message.activity_content or {}
        return [
            ag.ActivityMessage(id=id, activity_type=message.activity_type or "", content=content)
        ]
    out: list[ag.Message] = []
    for n, step in enumerate(sorted(message.reasonings, key=lambda r: r.seq), start=1):
        step_id = step.agui_id or (id if message.role == Role.REASONING else f"{id}-reasoning-{n}")
        out.append(
            ag.ReasoningMessage(
                id=step_id, content=step.content, encrypted_value=step.encrypted_value
            )
        )
    if message.role != Role.ASSISTANT:
        return out
    calls = sorted(message.tool_calls, key=lambda c: c.seq)
    agui_calls = [
        ag.ToolCall(id=c.tool_call_id, function=ag.FunctionCall(name=c.name, arguments=c.arguments))
        for c in calls
    ]
    out.append(
        ag.AssistantMessage(id=id, content=message.content or None, tool_calls=agui_calls or None)
    )
    for c in calls:
        if c.content is not None or c.error is not None:
            out.append(
                ag.ToolMessage(
                    id=c.result_message_id or tool_result_message_id(c.tool_call_id),
                    content=c.content if c.content is not None else "",
                    tool_call_id=c.tool_call_id,
                    error=c.error,
                )
            )
    return out


def _add_ordered(builder: _UIBuilder, message: StoredMessage, id: str) -> None:
    """Add a stored message that keeps a parts order: its parts where the order puts them."""
    # An empty reasoning message opens (or continues) the run's turn without a part.
    turn = builder.assistant_side(ag.ReasoningMessage(id=id, content=""), message.run_id)
    assert turn is not None
    claimed = turn.id
    for item in _agui_from_stored(message, id):
        builder.assistant_side(item, message.run_id, with_parts=False)
    if message.agui_id is None:
        turn.id = claimed  # a message with no AG-UI id does not name the turn
    for stored in message.tool_calls:
        call = turn.calls.get(stored.tool_call_id)
        if call is not None and call.run_state is None and stored.status == "complete":
            # Its arguments were ended (TOOL_CALL_END), as the live call says.
            turn.calls[call.tool_call_id] = call.model_copy(update={"run_state": "input-available"})
    for place, part in _parts_in_order(message, id):
        turn.add(part, place)


def _entries(metadata: dict[str, Any]) -> list[dict[str, Any]]:
    """A stored record's entries in its message's parts order (none on rows without one)."""
    order = metadata.get(PARTS_METADATA_KEY)
    if not isinstance(order, list):
        return []
    return [e for e in order if isinstance(e, dict) and isinstance(e.get("n"), int)]


def _has_order(message: StoredMessage) -> bool:
    """Whether a stored message was written with a parts order (rows before it were not)."""
    records: list[dict[str, Any]] = [message.metadata]
    records += [call.metadata for call in message.tool_calls]
    records += [step.metadata for step in message.reasonings]
    return any(isinstance(metadata.get(PARTS_METADATA_KEY), list) for metadata in records)


def _segments(entries: list[dict[str, Any]], text: str) -> list[tuple[int, str]]:
    """The segments of ``text`` its entries start, each running to the next start."""
    starts = sorted(
        (e.get("start", 0), e["n"])
        for e in entries
        if e.get("type") in ("text", "reasoning") and not e.get("encrypted")
    )
    ends = [start for start, _ in starts[1:]] + [len(text)] if starts else []
    return [(n, text[start:end]) for (start, n), end in zip(starts, ends, strict=True)]


def _listed_part(entry: dict[str, Any], message: StoredMessage, id: str) -> UIMessagePart | None:
    """The part a message's own entry stands for: a step start, a CUSTOM part, an activity."""
    kind = entry.get("type")
    if kind == "step-start":
        return StepStartPart(step=entry.get("step", 0), name=entry.get("name"))
    if kind == "citation":
        return CitationPart(citation=entry.get("citation"))
    if kind == "data" and "name" in entry:  # a CUSTOM event's payload, kept in the entry
        data_id = entry.get("id")
        return DataPart(
            name=str(entry["name"]),
            id=data_id if isinstance(data_id, str) else None,
            payload=entry.get("payload"),
        )
    if kind == "data" and message.role == Role.ACTIVITY:
        payload = message.activity_content or {}
        return DataPart(name=message.activity_type or "", id=id, payload=payload)
    return None


def _parts_in_order(message: StoredMessage, id: str) -> list[tuple[int, UIMessagePart]]:
    """The parts a stored message's parts order names, with their places."""
    out: list[tuple[int, UIMessagePart]] = []
    entries = _entries(message.metadata)
    out += [(n, TextPart(text=text)) for n, text in _segments(entries, message.content) if text]
    for entry in entries:
        part = _listed_part(entry, message, id)
        if part is not None:
            out.append((entry["n"], part))
    for step in message.reasonings:
        entries = _entries(step.metadata)
        out += [
            (n, ReasoningPart(text=text)) for n, text in _segments(entries, step.content) if text
        ]
        for entry in entries:
            if entry.get("encrypted"):
                hidden = ReasoningPart(text=step.encrypted_value or "", encrypted=True)
                out.append((entry["n"], hidden))
    for call in message.tool_calls:
        out += [(e["n"], ToolPart(tool_call_id=call.tool_call_id)) for e in _entries(call.metadata)]
    return out


def _sub_agents(message: HistoryMessage) -> bool:
    """Whether a sub-agent produced ``message`` (AG-UI attribution, or stored metadata)."""
    if isinstance(message, StoredMessage):
        return message.metadata.get(SUBAGENT_METADATA_KEY) is not None
    return getattr(message, "subagent_run_id", None) is not None


def ui_from_messages(
    messages: Iterable[HistoryMessage], generate_id: Callable[[], str]
) -> list[UIMessage]:
    """Project a history (AG-UI messages or stored ``Message`` s) into UI messages with parts.

    Tool results merge into the assistant turn holding their call; system and
    developer messages are not rendered. One assistant UI message holds a whole
    turn: for stored messages, the consecutive ones of one run; for AG-UI messages,
    an assistant message and whatever continues it after tool results (a reasoning
    or assistant message right after an assistant message starts a new turn). A
    message keeps its own id; ``generate_id`` names a stored message that has none.
    Stored messages read in the parts order the storage fold recorded (the run's
    elements where they opened, as the live turn has them); rows written before it
    was kept read in bucket order: reasoning, text, tool calls. A sub-agent's
    messages are not the assistant's own words and are left out, as a live turn
    keeps them out of its parts.
    """
    builder = _UIBuilder()
    for message in messages:
        if _sub_agents(message):
            continue
        if isinstance(message, StoredMessage):
            if message.role in (Role.SYSTEM, Role.DEVELOPER):
                builder.flush()
            elif message.role == Role.USER:
                parts = message.content_parts
                content = message.content if parts is None else parts
                builder.user(_user_ui(message.agui_id or generate_id(), content, _file_from_stored))
            elif message.role != Role.TOOL:
                id = message.agui_id or generate_id()
                if _has_order(message):
                    _add_ordered(builder, message, id)
                    continue
                for item in _agui_from_stored(message, id):
                    builder.assistant_side(item, message.run_id)
        elif isinstance(message, ag.UserMessage):
            builder.user(_user_ui(message.id, message.content, _file_from_agui))
        elif isinstance(message, ag.SystemMessage | ag.DeveloperMessage):
            builder.flush()
        else:
            builder.assistant_side(message, None)
    builder.flush()
    return builder.out


# --- UI -> canonical -----------------------------------------------------------------


def _media_from_file(part: FilePart) -> ag.ContentPart:
    if part.source == "url":
        source: Any = ag.UrlSource(value=str(part.data), mime_type=part.media_type or None)
    elif part.source == "file":
        source = ag.FileSource(value=str(part.data), mime_type=part.media_type or None)
    else:
        data = part.data
        value = base64.b64encode(data).decode("ascii") if isinstance(data, bytes) else data
        source = ag.DataSource(value=value, mime_type=part.media_type)
    # Without a declared kind, the media type's head names it; anything else is a document.
    kind = part.kind or part.media_type.split("/", 1)[0]
    return _MEDIA_PARTS.get(kind, ag.DocumentPart)(source=source)


def _user_canonical(message: UIMessage) -> ag.UserMessage:
    parts = message.parts
    if parts is None:
        return ag.UserMessage(id=message.id, content=message.content)
    if not any(isinstance(part, FilePart) for part in parts):
        text = "".join(part.text for part in parts if isinstance(part, TextPart))
        return ag.UserMessage(id=message.id, content=text)
    content: list[ag.ContentPart] = []
    for part in parts:
        if isinstance(part, TextPart):
            content.append(ag.TextPart(text=part.text))
        elif isinstance(part, FilePart):
            content.append(_media_from_file(part))
    return ag.UserMessage(id=message.id, content=content)


class _CanonicalBuilder:
    """Walks one assistant UI message's parts into AG-UI messages, in order."""

    def __init__(self, message: UIMessage) -> None:
        self.message = message
        self.out: list[ag.Message] = []
        self.text: list[str] = []
        self.calls: list[UIToolCall] = []
        self.thought: list[str] = []
        self.encrypted: str | None = None
        self.thinking = False
        self.segments = 0

    def _id(self, kind: str) -> str:
        self.segments += 1
        if kind == "assistant" and not any(isinstance(m, ag.AssistantMessage) for m in self.out):
            return self.message.id
        return f"{self.message.id}-{kind}-{self.segments}"

    def reasoning(self, part: ReasoningPart) -> None:
        self.segment()
        if part.encrypted:
            self.encrypted = part.text
        else:
            self.thought.append(part.text)
        self.thinking = True

    def content(self, text: str) -> None:
        self.thoughts()
        if self.calls:
            self.segment()
        self.text.append(text)

    def call(self, call: UIToolCall) -> None:
        self.thoughts()
        self.calls.append(call)

    def thoughts(self) -> None:
        if self.thinking:
            content = "".join(self.thought)
            self.out.append(
                ag.ReasoningMessage(
                    id=self._id("reasoning"), content=content, encrypted_value=self.encrypted
                )
            )
            self.thought, self.encrypted, self.thinking = [], None, False

    def segment(self) -> None:
        if not (self.text or self.calls):
            return
        calls = [_agui_tool_call(call) for call in self.calls]
        self.out.append(
            ag.AssistantMessage(
                id=self._id("assistant"),
                content="".join(self.text) or None,
                tool_calls=calls or None,
            )
        )
        # Every tool call needs its result after it; a call still waiting stays bare.
        self.out.extend(_tool_message(call) for call in self.calls if call.state == "result")
        self.text, self.calls = [], []

    def finish(self) -> list[ag.Message]:
        self.thoughts()
        self.segment()
        return self.out


def _assistant_canonical(message: UIMessage) -> list[ag.Message]:
    builder = _CanonicalBuilder(message)
    calls = {call.tool_call_id: call for call in message.tool_calls or ()}
    if message.parts is None:
        # Bucket order: one reasoning block, one text block, every tool call.
        if message.reasoning:
            builder.reasoning(ReasoningPart(text=message.reasoning))
        if message.content:
            builder.content(message.content)
        for call in calls.values():
            builder.call(call)
        return builder.finish()
    for part in message.parts:
        if isinstance(part, ReasoningPart):
            builder.reasoning(part)
        elif isinstance(part, TextPart):
            builder.content(part.text)
        elif isinstance(part, ToolPart) and part.tool_call_id in calls:
            builder.call(calls[part.tool_call_id])
    return builder.finish()


def canonical_from_ui(ui: Iterable[UIMessage]) -> list[ag.Message]:
    """The AG-UI history of UI messages: the inverse of :func:`ui_from_messages`.

    Parts are preferred over buckets. AG-UI keeps one text and one list of calls per
    assistant message, so text after a tool call starts a new assistant message and
    executed calls are followed by their tool messages. Lost on purpose: system
    messages, message-level metadata, the split between consecutive text parts, data
    and citation parts, step boundaries, and UI-only state (``run_state``, denial,
    pending approvals); a call without a result stays a bare tool call.
    """
    out: list[ag.Message] = []
    for message in ui:
        if message.role == "user":
            out.append(_user_canonical(message))
        else:
            out.extend(_assistant_canonical(message))
    return out
