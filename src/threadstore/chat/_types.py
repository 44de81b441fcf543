"""The chat engine's render-friendly shapes: UI messages, ordered parts and the turn.

Absent means ``None``. Every optional field of these models defaults to ``None`` and
is left out when the model is serialized (``model_dump``, ``model_dump_json``), so a
UI message that never had reasoning has no ``reasoning`` key at all. An
:class:`AssistantTurn` keeps its optional buckets in the same way: each reads as
``None`` and is missing from :meth:`AssistantTurn.as_dict` until the event that fills
it has arrived, so the initial shape never invents a key.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_serializer,
)
from pydantic_core import to_jsonable_python

__all__ = [
    "AssistantTurn",
    "CitationPart",
    "DataPart",
    "FilePart",
    "ReasoningPart",
    "StepInfo",
    "StepStartPart",
    "SubAgentFrame",
    "TextPart",
    "ToolPart",
    "ToolRunState",
    "TurnError",
    "UIMessage",
    "UIMessagePart",
    "UIToolCall",
]

ToolRunState = Literal["input-streaming", "input-available", "output-available"]
"""A tool call's fine-grained lifecycle: arguments streaming, complete, result known."""


class _UIModel(BaseModel):
    """Frozen; optional fields without a value are left out when serialized."""

    model_config = ConfigDict(frozen=True, ser_json_bytes="base64", val_json_bytes="base64")

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        fields = type(self).model_fields
        return {
            key: value
            for key, value in data.items()
            if value is not None or key not in fields or fields[key].default is not None
        }


# --- ordered parts -------------------------------------------------------------------


class TextPart(_UIModel):
    """Prose; ``streaming`` only while it is the newest element of its turn."""

    type: Literal["text"] = "text"
    text: str
    state: Literal["streaming", "done"] = "done"


class ReasoningPart(_UIModel):
    """Thinking text; ``encrypted`` text is an opaque provider payload, never display text."""

    type: Literal["reasoning"] = "reasoning"
    text: str
    signature: str | None = None
    encrypted: bool | None = None
    redacted: bool | None = None
    state: Literal["streaming", "done"] = "done"


class ToolPart(_UIModel):
    """A reference into :attr:`UIMessage.tool_calls`; the call itself lives there."""

    type: Literal["tool"] = "tool"
    tool_call_id: str


def _json_value(value: Any) -> Any:
    # Bytes anywhere in a producer's value are base64 in JSON, as the models' own bytes
    # fields are, whatever model holds this part (a page, a response).
    return to_jsonable_python(value, bytes_mode="base64")


class DataPart(_UIModel):
    """Application data (a CUSTOM event or an activity); a string ``id`` makes it addressable."""

    type: Literal["data"] = "data"
    name: str
    id: str | None = None
    payload: Any = None

    @field_serializer("payload", when_used="json")
    def _payload_json(self, value: Any) -> Any:
        return _json_value(value)


class CitationPart(_UIModel):
    """A source the answer cites, as the producer sent it."""

    type: Literal["citation"] = "citation"
    citation: Any = None

    @field_serializer("citation", when_used="json")
    def _citation_json(self, value: Any) -> Any:
        return _json_value(value)


class StepStartPart(_UIModel):
    """The start of a step (``STEP_STARTED``); ``step`` counts from 0 within the turn."""

    type: Literal["step-start"] = "step-start"
    step: int
    name: str | None = None


class FilePart(_UIModel):
    """An attachment; ``url`` is set only when the value is already a renderable src."""

    type: Literal["file"] = "file"
    media_type: str
    data: bytes | str
    """The carrier verbatim: bytes stay bytes, base64 text, a URL or a provider file id."""
    url: str | None = None
    source: Literal["data", "url", "file"] = "data"
    """Where ``data`` comes from: inline (bytes or base64 text), a URL, a provider file id."""
    kind: Literal["image", "audio", "video", "document"] | None = None
    """The media kind the message declared; ``None`` reads it from ``media_type``."""


UIMessagePart = Annotated[
    TextPart | ReasoningPart | ToolPart | DataPart | CitationPart | StepStartPart | FilePart,
    Field(discriminator="type"),
]
"""One ordered element of a UI message, tagged by ``type``. Keep a default in a switch."""


# --- messages ------------------------------------------------------------------------


class UIToolCall(_UIModel):
    """A tool call as a renderer sees it: input, output and where it is in its life."""

    tool_call_id: str
    tool_name: str
    input: Any = None
    """The arguments parsed as JSON, or the raw text while it does not parse."""
    arguments: str = ""
    """The arguments exactly as streamed (what goes back to the model)."""
    output: Any = None
    is_error: bool | None = None
    state: Literal["call", "result", "approval-requested"] = "call"
    run_state: ToolRunState | None = None
    denied: bool | None = None
    denied_reason: str | None = None
    encrypted_value: str | None = None
    """The provider's opaque artefact for this call (REASONING_ENCRYPTED_VALUE, tool-call)."""
    metadata: dict[str, Any] | None = None
    """Provider metadata of the call, carried back to the model unchanged."""


class UIMessage(_UIModel):
    """A render-friendly message: buckets (``content``, ``reasoning``, ``tool_calls``) and parts.

    ``parts`` is the ordered projection and is absent until the first element exists;
    render it when present and the buckets otherwise.
    """

    id: str
    role: Literal["user", "assistant"]
    content: str = ""
    reasoning: str | None = None
    tool_calls: tuple[UIToolCall, ...] | None = None
    parts: tuple[UIMessagePart, ...] | None = None

    def tool_call(self, tool_call_id: str) -> UIToolCall | None:
        """The call a ``tool`` part refers to, or ``None``."""
        return next((c for c in self.tool_calls or () if c.tool_call_id == tool_call_id), None)


# --- turn readouts -------------------------------------------------------------------


class TurnError(_UIModel):
    """A ``RUN_ERROR`` (or ``SUBAGENT_ERROR``) as it arrived: recorded, never raised."""

    message: str
    code: str | None = None


class StepInfo(_UIModel):
    """One ``STEP_STARTED``, and whether its ``STEP_FINISHED`` has arrived."""

    step: int
    name: str
    finished: bool = False


# A chain is a persistent singly linked list, newest item first: ``(rest, item)``.
# Appending makes one tuple and shares everything before it, so a turn built by
# appending a delta never copies the deltas it already holds (see docs/chat-engine.md).
Chain = tuple[Any, Any] | None


def chain_items(chain: Chain) -> list[Any]:
    """The items of a chain, oldest first (one walk, one reversal)."""
    items: list[Any] = []
    while chain is not None:
        chain, item = chain
        items.append(item)
    items.reverse()
    return items


def chain_replace(chain: Chain, match: Callable[[Any], bool], new: Any) -> Chain | None:
    """The chain with its newest item matching ``match`` replaced, or ``None`` if none does.

    Costs the distance from the newest item: the items before the match are shared.
    """
    newer: list[Any] = []
    while chain is not None:
        rest, item = chain
        if match(item):
            rebuilt: Chain = (rest, new)
            for later in reversed(newer):
                rebuilt = (rebuilt, later)
            return rebuilt
        newer.append(item)
        chain = rest
    return None


def chain_find(chain: Chain, match: Callable[[Any], bool]) -> Any:
    """The newest item of the chain matching ``match``, or ``None``."""
    while chain is not None:
        chain, item = chain
        if match(item):
            return item
    return None


def chain_text(chain: Chain) -> str:
    """The deltas of a chain joined into one string."""
    return "".join(chain_items(chain))


class Tail:
    """The turn's open text or reasoning element: its kind, source id and deltas so far."""

    __slots__ = ("chain", "kind", "source")

    def __init__(self, kind: Literal["text", "reasoning"], source: str | None, chain: Chain):
        self.kind = kind
        self.source = source
        self.chain = chain

    def extended(self, delta: str) -> Tail:
        """A new tail with ``delta`` appended; this one is unchanged."""
        return Tail(self.kind, self.source, (self.chain, delta))

    def part(self, state: Literal["streaming", "done"]) -> TextPart | ReasoningPart:
        """The element as a part, its text joined once."""
        text = chain_text(self.chain)
        if self.kind == "text":
            return TextPart(text=text, state=state)
        return ReasoningPart(text=text, state=state)


_STATE = {
    name: f"_{name}"
    for name in ("id", "parts", "count", "calls", "args", "buckets", "frames", "notes")
}
"""The state :meth:`AssistantTurn.evolve` may replace, by keyword, to its slot."""


class AssistantTurn:
    """One streamed assistant turn: the :class:`UIMessage` so far plus its readouts.

    Immutable: :func:`~threadstore.chat.apply_event` returns a new turn and never
    changes this one. The fold keeps deltas in shared persistent chains; ``message``
    joins them on first read and caches the result on this turn object.

    Every bucket reads ``None`` until the event that fills it arrives:

    - ``approvals``: interrupts of a ``RUN_FINISHED`` with outcome ``interrupt``;
    - ``server_results``: ids of the calls whose ``TOOL_CALL_RESULT`` came in the stream;
    - ``data_parts``: data parts in arrival order (addressable ones replaced in place);
    - ``citations``: ``CUSTOM`` events named ``citation``;
    - ``error``: the ``RUN_ERROR``; ``usage``, ``finish_reason``, ``result``: ``RUN_FINISHED``;
    - ``steps``: ``STEP_STARTED``/``STEP_FINISHED``; ``warnings``: events that could not
      be applied as they were (an unknown call's result, a patch that does not apply);
    - ``sub_agents``: one :class:`SubAgentFrame` per sub-agent invocation;
    - the seed engine's channels, from ``CUSTOM`` events of their names
      (:data:`~threadstore.chat.CHANNEL_EVENTS`; each is a data part too):
      ``verifications`` and ``false_finishes`` in arrival order, ``plan`` and
      ``activity`` the latest value;
    - the seed engine's live cost channels: ``cost_usd`` and ``cache_savings_usd`` (its
      ``costUsd``, ``cacheSavingsUsd``), the sums of the turn's ``CUSTOM`` usage events
      so far, and ``budget_exceeded`` (``budgetExceeded``), ``True`` once the run was
      refused because a budget is spent (``RUN_ERROR`` code ``BUDGET_EXCEEDED``).

    ``evolve`` and the state properties (``part_chain``, ``tail``, ``calls``...) are
    the reducer's working view; renderers read ``message`` and the buckets.
    """

    __slots__ = (
        "_args",
        "_buckets",
        "_calls",
        "_count",
        "_frames",
        "_id",
        "_message",
        "_notes",
        "_parts",
        "_tail",
    )

    BUCKETS = (
        "approvals",
        "server_results",
        "data_parts",
        "citations",
        "error",
        "usage",
        "finish_reason",
        "result",
        "steps",
        "warnings",
        "sub_agents",
        "plan",
        "activity",
        "verifications",
        "false_finishes",
        "cost_usd",
        "cache_savings_usd",
        "budget_exceeded",
    )
    """The optional readouts, in the order :meth:`as_dict` lists them."""

    def __init__(
        self,
        id: str,
        *,
        parts: Chain = None,
        count: int = 0,
        tail: Tail | None = None,
        calls: Mapping[str, UIToolCall] | None = None,
        args: Mapping[str, Chain] | None = None,
        buckets: Mapping[str, Any] | None = None,
        frames: Mapping[str, SubAgentFrame] | None = None,
        notes: Mapping[str, Any] | None = None,
    ) -> None:
        self._id = id
        self._parts = parts
        self._count = count
        self._tail = tail
        self._calls: Mapping[str, UIToolCall] = calls if calls is not None else {}
        self._args: Mapping[str, Chain] = args if args is not None else {}
        self._buckets: Mapping[str, Any] = buckets if buckets is not None else {}
        self._frames: Mapping[str, SubAgentFrame] = frames if frames is not None else {}
        self._notes: Mapping[str, Any] = notes if notes is not None else {}
        self._message: UIMessage | None = None

    def evolve(self, **changes: Any) -> AssistantTurn:
        """A copy of this turn with some of its state replaced (for the reducer)."""
        turn = self.with_tail(changes.pop("tail", self._tail))
        for name, value in changes.items():
            setattr(turn, _STATE[name], value)
        return turn

    def with_tail(self, tail: Tail | None) -> AssistantTurn:
        """A copy of this turn with only its open element replaced: every delta's path."""
        turn = AssistantTurn.__new__(AssistantTurn)
        turn._id, turn._parts, turn._count, turn._tail = self._id, self._parts, self._count, tail
        turn._calls, turn._args, turn._buckets = self._calls, self._args, self._buckets
        turn._frames, turn._notes, turn._message = self._frames, self._notes, None
        return turn

    @property
    def id(self) -> str:
        """The turn's message id: the first assistant message id the stream named."""
        return self._id

    # --- the reducer's view ------------------------------------------------------------

    @property
    def part_chain(self) -> Chain:
        """The closed parts, newest first (the open tail is not in it)."""
        return self._parts

    @property
    def part_count(self) -> int:
        """How many ordered elements the turn has, the open tail included."""
        return self._count

    @property
    def tail(self) -> Tail | None:
        """The open text or reasoning element, if any."""
        return self._tail

    @property
    def calls(self) -> Mapping[str, UIToolCall]:
        """The tool calls by id, in the order they opened (arguments as of their end)."""
        return self._calls

    @property
    def streaming_args(self) -> Mapping[str, Chain]:
        """Argument deltas of calls whose ``TOOL_CALL_END`` has not arrived."""
        return self._args

    @property
    def buckets(self) -> Mapping[str, Any]:
        """The optional readouts present so far, by name."""
        return self._buckets

    @property
    def frames(self) -> Mapping[str, SubAgentFrame]:
        """The sub-agent frames by ``subagent_run_id``."""
        return self._frames

    @property
    def notes(self) -> Mapping[str, Any]:
        """The reducer's private bookkeeping (open message ids and roles)."""
        return self._notes

    # --- the public readouts -----------------------------------------------------------

    @property
    def message(self) -> UIMessage:
        """The turn as a :class:`UIMessage` (joined on first read, then cached)."""
        if self._message is None:
            self._message = _materialize(self)
        return self._message

    def _listed(self, name: str) -> tuple[Any, ...] | None:
        # Append-only buckets are chains (O(1) per append); a read lists them.
        chain = self._buckets.get(name)
        return tuple(chain_items(chain)) if chain is not None else None

    @property
    def approvals(self) -> tuple[dict[str, Any], ...] | None:
        """Interrupts awaiting a verdict (AG-UI ``Interrupt`` objects as JSON)."""
        return self._buckets.get("approvals")

    @property
    def server_results(self) -> tuple[str, ...] | None:
        """Ids of the calls the server executed (their result came in the stream)."""
        return self._listed("server_results")

    @property
    def data_parts(self) -> tuple[DataPart, ...] | None:
        """Data parts in arrival order; an addressable one is replaced in place."""
        return self._listed("data_parts")

    @property
    def citations(self) -> tuple[Any, ...] | None:
        """Citations in arrival order."""
        return self._listed("citations")

    @property
    def error(self) -> TurnError | None:
        """The run's error, recorded when ``RUN_ERROR`` arrived."""
        return self._buckets.get("error")

    @property
    def usage(self) -> tuple[dict[str, Any], ...] | None:
        """Token usage from ``RUN_FINISHED`` or ``RUN_ERROR``."""
        return self._buckets.get("usage")

    @property
    def finish_reason(self) -> str | None:
        """``RUN_FINISHED``'s outcome: ``success``, ``interrupt`` or ``cancelled``."""
        return self._buckets.get("finish_reason")

    @property
    def result(self) -> Any:
        """``RUN_FINISHED``'s result, when it carried one."""
        return self._buckets.get("result")

    @property
    def steps(self) -> tuple[StepInfo, ...] | None:
        """Steps in the order they started."""
        return self._listed("steps")

    @property
    def warnings(self) -> tuple[str, ...] | None:
        """Events that could not be applied as they were, described."""
        return self._listed("warnings")

    @property
    def cost_usd(self) -> float | None:
        """What the turn has cost so far, from its usage events (the seed's ``costUsd``)."""
        return self._buckets.get("cost_usd")

    @property
    def cache_savings_usd(self) -> float | None:
        """What provider caches saved so far (the seed's ``cacheSavingsUsd``)."""
        return self._buckets.get("cache_savings_usd")

    @property
    def budget_exceeded(self) -> bool | None:
        """``True`` when the run was refused over a spent budget (``budgetExceeded``)."""
        return self._buckets.get("budget_exceeded")

    @property
    def plan(self) -> Any:
        """The latest ``plan-update`` value (the seed engine's ``plan``)."""
        return self._buckets.get("plan")

    @property
    def activity(self) -> Any:
        """The latest ``activity`` value (the seed engine's ``activity``)."""
        return self._buckets.get("activity")

    @property
    def verifications(self) -> tuple[Any, ...] | None:
        """``verification`` values (verdicts on a step) in arrival order."""
        return self._listed("verifications")

    @property
    def false_finishes(self) -> tuple[Any, ...] | None:
        """``false-finish`` values in arrival order (the seed engine's ``falseFinishes``)."""
        return self._listed("false_finishes")

    @property
    def sub_agents(self) -> tuple[SubAgentFrame, ...] | None:
        """Sub-agent frames in the order they opened."""
        return tuple(self._frames.values()) if self._frames else None

    def as_dict(self) -> dict[str, Any]:
        """The turn as JSON-ready data: ``message`` plus only the buckets present."""
        data: dict[str, Any] = {"id": self.id, "message": self.message.model_dump(mode="json")}
        for name in self.BUCKETS:
            value = getattr(self, name)
            if name in self._buckets or (name == "sub_agents" and value is not None):
                data[name] = _jsonable(value)
        return data

    def __repr__(self) -> str:
        present = [name for name in self.BUCKETS if getattr(self, name) is not None]
        return f"AssistantTurn(id={self.id!r}, parts={self._count}, buckets={present})"


class SubAgentFrame:
    """A sub-agent's own turn, folded by the same reducer, beside its parent's parts.

    ``after_part`` is the parent's part count when the frame opened, so a renderer can
    splice the frame in at the hand-off point. ``agent_path`` names the agent and its
    ancestors (from ``SUBAGENT_STARTED.name`` and ``parent_subagent_run_id``).
    """

    __slots__ = ("after_part", "agent_path", "parent_tool_call_id", "subagent_run_id", "turn")

    def __init__(
        self,
        subagent_run_id: str,
        agent_path: tuple[str, ...],
        after_part: int,
        turn: AssistantTurn,
        parent_tool_call_id: str | None = None,
    ) -> None:
        self.subagent_run_id = subagent_run_id
        self.agent_path = agent_path
        self.after_part = after_part
        self.turn = turn
        self.parent_tool_call_id = parent_tool_call_id

    def with_turn(self, turn: AssistantTurn) -> SubAgentFrame:
        """The same frame holding ``turn``."""
        return SubAgentFrame(
            self.subagent_run_id, self.agent_path, self.after_part, turn, self.parent_tool_call_id
        )

    def as_dict(self) -> dict[str, Any]:
        """The frame as JSON-ready data."""
        data: dict[str, Any] = {
            "subagent_run_id": self.subagent_run_id,
            "agent_path": list(self.agent_path),
            "after_part": self.after_part,
            "turn": self.turn.as_dict(),
        }
        if self.parent_tool_call_id is not None:
            data["parent_tool_call_id"] = self.parent_tool_call_id
        return data

    def __repr__(self) -> str:
        return (
            f"SubAgentFrame(agent_path={self.agent_path!r}, after_part={self.after_part}, "
            f"turn={self.turn!r})"
        )


def wire_json(value: Any) -> Any:
    """A protocol model as its JSON data (camelCase, as on the wire); anything else as is."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, SubAgentFrame):
        return value.as_dict()
    if isinstance(value, tuple | list):
        return [_jsonable(item) for item in value]
    return value


def turn_parts(turn: AssistantTurn) -> Iterator[UIMessagePart]:
    """The turn's ordered parts, oldest first, the open tail last."""
    yield from chain_items(turn.part_chain)
    if turn.tail is not None:
        yield turn.tail.part("streaming")


def _materialize(turn: AssistantTurn) -> UIMessage:
    calls = [with_streamed_args(call, turn.streaming_args) for call in turn.calls.values()]
    return assistant_ui_message(turn.id, tuple(turn_parts(turn)), calls)


def assistant_ui_message(
    id: str, parts: Sequence[UIMessagePart], calls: Sequence[UIToolCall]
) -> UIMessage:
    """An assistant UI message of ``parts``: its buckets are the parts' text and reasoning."""
    thoughts = [part for part in parts if isinstance(part, ReasoningPart)]
    return UIMessage(
        id=id,
        role="assistant",
        content="".join(part.text for part in parts if isinstance(part, TextPart)),
        reasoning="".join(p.text for p in thoughts if not p.encrypted) if thoughts else None,
        tool_calls=tuple(calls) or None,
        parts=tuple(parts) or None,
    )


def with_streamed_args(call: UIToolCall, streaming: Mapping[str, Chain]) -> UIToolCall:
    """The call with the arguments streamed for it so far, if any, joined and parsed."""
    if call.tool_call_id not in streaming:
        return call
    arguments = chain_text(streaming[call.tool_call_id])
    return call.model_copy(update={"arguments": arguments, "input": parse_arguments(arguments)})


def with_result(call: UIToolCall, content: Any, **changes: Any) -> UIToolCall:
    """The call with a tool's result (text, or content parts as wire JSON) as its output."""
    output = content if isinstance(content, str) else [wire_json(part) for part in content]
    state = {"output": output, "state": "result", "run_state": "output-available"}
    return call.model_copy(update={**state, **changes})


def parse_arguments(arguments: str) -> Any:
    """Tool arguments as JSON when they parse, else the raw text (still streaming, or not JSON)."""
    if not arguments:
        return None
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments
