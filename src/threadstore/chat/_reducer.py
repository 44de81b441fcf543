"""The turn reducer: fold one AG-UI event into an :class:`AssistantTurn`, purely.

``apply_event(turn, event)`` returns a new turn and never changes ``turn`` or
``event``; an event it has no rule for is ignored, and one it cannot apply as it is
(a result for an unknown call, a patch that does not apply) is recorded in
``warnings``. The rules are listed in docs/chat-engine.md.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Literal

import jsonpatch
from ag_ui import core as ag
from pydantic import ValidationError

from threadstore.chat._seal import closed_parts, seal_assistant_turn
from threadstore.chat._types import (
    AssistantTurn,
    Chain,
    CitationPart,
    DataPart,
    ReasoningPart,
    StepInfo,
    StepStartPart,
    SubAgentFrame,
    Tail,
    TextPart,
    ToolPart,
    TurnError,
    UIMessagePart,
    UIToolCall,
    chain_find,
    chain_items,
    chain_replace,
    wire_json,
    with_result,
    with_streamed_args,
)
from threadstore.codec import StreamReader, event_kind
from threadstore.models import CITATION_EVENT_NAME
from threadstore.usage import BUDGET_EXCEEDED_ERROR_CODE, USAGE_EVENT_NAME, UsageReport

__all__ = ["CHANNEL_EVENTS", "CITATION_EVENT_NAME", "apply_event", "create_assistant_turn"]

CHANNEL_EVENTS: dict[str, tuple[str, Literal["append", "latest"]]] = {
    "verification": ("verifications", "append"),
    "false-finish": ("false_finishes", "append"),
    "plan-update": ("plan", "latest"),
    "activity": ("activity", "latest"),
}
"""The ``CUSTOM`` event names the seed engine folds into turn channels: each name's
bucket, and whether a value is appended to it or replaces it. The event is a data part
as well, as any ``CUSTOM`` event, so stored history keeps it."""

Handler = Callable[[AssistantTurn, Any], AssistantTurn]


def create_assistant_turn(id: str) -> AssistantTurn:
    """An empty assistant turn: no parts, no calls, and no bucket present."""
    return AssistantTurn(id)


def apply_event(turn: AssistantTurn, event: ag.BaseEvent) -> AssistantTurn:
    """Fold ``event`` into ``turn`` and return the new turn; ``turn`` is unchanged.

    The event is read as the stream's one reading reads it (chunks and ``THINKING_*``
    events in their explicit form, :class:`~threadstore.codec.stream.StreamReader`,
    kept in the turn). An event attributed to a sub-agent (``subagent_run_id``) is
    folded into that sub-agent's frame, by this same reducer, and never into the
    turn's own parts.
    """
    reader = turn.notes.get("reader", _READER)
    if reader.passes(event):
        return _apply(turn, event)
    after, events = reader.read(event)
    if after is not reader:
        turn = turn.evolve(notes={**turn.notes, "reader": after})
        if after.warning is not None:
            turn = _warn(turn, after.warning)
    elif len(events) != 1:
        turn = turn.evolve()
    for one in events:
        turn = _apply(turn, one)
    return turn


_READER = StreamReader()


def _apply(turn: AssistantTurn, event: Any) -> AssistantTurn:
    """Fold one explicit event (the stream's reading made chunks and THINKING_* explicit)."""
    if type(event) not in _HANDLERS:  # the deltas (most of a stream) skip the name lookup
        lifecycle = _SUBAGENT_HANDLERS.get(event_kind(event))
        if lifecycle is not None:
            return lifecycle(turn, event)
    subagent = getattr(event, "subagent_run_id", None)
    if subagent is not None:
        return _in_frame(turn, subagent, event)
    return _fold(turn, event)


def _fold(turn: AssistantTurn, event: Any) -> AssistantTurn:
    handler = _HANDLERS.get(type(event)) or _HANDLERS_BY_NAME.get(event_kind(event))
    return handler(turn, event) if handler is not None else turn.evolve()


# --- building blocks -----------------------------------------------------------------


def _buckets(turn: AssistantTurn, **items: Any) -> dict[str, Any]:
    return {**turn.buckets, **items}


def _appended(turn: AssistantTurn, bucket: str, item: Any) -> Chain:
    """The append-only ``bucket`` with ``item`` added (a chain: O(1), nothing copied)."""
    return (turn.buckets.get(bucket), item)


def _warn(turn: AssistantTurn, warning: str) -> AssistantTurn:
    return turn.evolve(buckets=_buckets(turn, warnings=_appended(turn, "warnings", warning)))


def _push(turn: AssistantTurn, part: UIMessagePart, **changes: Any) -> AssistantTurn:
    """Open a new element: the open one is sealed first (a later delta starts a new one)."""
    return turn.evolve(
        parts=(closed_parts(turn), part), tail=None, count=turn.part_count + 1, **changes
    )


def _adopt(turn: AssistantTurn, message_id: str | None) -> dict[str, Any]:
    """Changes that make the stream's first assistant message id the turn's id."""
    if message_id is None or turn.notes.get("adopted"):
        return {}
    return {"id": message_id, "notes": {**turn.notes, "adopted": True}}


def _delta(
    turn: AssistantTurn, kind: Literal["text", "reasoning"], source: str | None, delta: str
) -> AssistantTurn:
    tail = turn.tail
    if tail is not None and tail.kind == kind and tail.source == source:
        return turn.with_tail(tail.extended(delta) if delta else tail)
    if not delta:
        return turn.evolve()
    changes = _adopt(turn, source) if kind == "text" else {}
    return turn.evolve(
        parts=closed_parts(turn),
        tail=Tail(kind, source, (None, delta)),
        count=turn.part_count + 1,
        **changes,
    )


def _seal_tail(
    turn: AssistantTurn, kind: Literal["text", "reasoning"], source: str | None = None
) -> AssistantTurn:
    """Seal the open element if it is of ``kind`` (and from ``source``, when given)."""
    tail = turn.tail
    if tail is None or tail.kind != kind or (source is not None and tail.source != source):
        return turn.evolve()
    return turn.evolve(parts=closed_parts(turn), tail=None)


# --- text ----------------------------------------------------------------------------


def _text_start(turn: AssistantTurn, event: ag.TextMessageStartEvent) -> AssistantTurn:
    """Remember a text message that is not the assistant's (its deltas are not this turn's)."""
    message_id = event.message_id
    if message_id is None or event.role in (None, "assistant"):
        return turn.evolve(**_adopt(turn, message_id))
    foreign = turn.notes.get("foreign", frozenset())
    return turn.evolve(notes={**turn.notes, "foreign": foreign | {message_id}})


def _text_content(turn: AssistantTurn, event: ag.TextMessageContentEvent) -> AssistantTurn:
    if event.message_id in turn.notes.get("foreign", ()):
        return turn.evolve()
    return _delta(turn, "text", event.message_id, event.delta)


def _text_end(turn: AssistantTurn, event: ag.TextMessageEndEvent) -> AssistantTurn:
    return _seal_tail(turn, "text", event.message_id)


# --- reasoning -----------------------------------------------------------------------


def _reasoning_content(
    turn: AssistantTurn, event: ag.ReasoningMessageContentEvent
) -> AssistantTurn:
    return _delta(
        _noted_reasoning(turn, event.message_id), "reasoning", event.message_id, event.delta
    )


def _reasoning_message_end(
    turn: AssistantTurn, event: ag.ReasoningMessageEndEvent
) -> AssistantTurn:
    return _seal_tail(turn, "reasoning", event.message_id)


def _reasoning_end(turn: AssistantTurn, event: Any) -> AssistantTurn:
    if isinstance(event, ag.ReasoningEndEvent) and turn.notes.get("span") == event.message_id:
        turn = turn.evolve(notes={k: v for k, v in turn.notes.items() if k != "span"})
    return _seal_tail(turn, "reasoning")


def _noted_reasoning(turn: AssistantTurn, message_id: str | None) -> AssistantTurn:
    """Remember a reasoning message the stream opened (a later encrypted value may name it)."""
    seen = turn.notes.get("reasoning_ids", frozenset())
    if message_id is None or message_id in seen:
        return turn
    return turn.evolve(notes={**turn.notes, "reasoning_ids": seen | {message_id}})


def _reasoning_message_start(
    turn: AssistantTurn, event: ag.ReasoningMessageStartEvent
) -> AssistantTurn:
    return _noted_reasoning(turn, event.message_id).evolve()


def _reasoning_start(turn: AssistantTurn, event: ag.ReasoningStartEvent) -> AssistantTurn:
    return turn.evolve(notes={**turn.notes, "span": event.message_id})


def _agent_wrote(turn: AssistantTurn) -> bool:
    """Whether the stream opened anything the store keeps as a message of the agent's."""
    notes = turn.notes
    if notes.get("adopted") or notes.get("reasoning_ids") or notes.get("activities"):
        return True
    if turn.calls or turn.tail is not None:
        return True
    return any(isinstance(part, TextPart | ReasoningPart) for part in chain_items(turn.part_chain))


def _encrypted_value(turn: AssistantTurn, event: ag.ReasoningEncryptedValueEvent) -> AssistantTurn:
    if event.subtype == "message":
        entity = event.entity_id
        known = entity in turn.notes.get("reasoning_ids", ()) or entity == turn.notes.get("span")
        if not known and not _agent_wrote(turn):
            # Nothing to attach it to (the store keeps no message for it): not shown either.
            return _warn(turn, f"encrypted value for {entity!r} with no message ignored")
        part = ReasoningPart(text=event.encrypted_value, encrypted=True, state="done")
        return _push(turn, part)
    call = turn.calls.get(event.entity_id)
    if call is None:
        return _warn(turn, f"encrypted value for unknown tool call {event.entity_id!r} ignored")
    return _set_call(turn, call.model_copy(update={"encrypted_value": event.encrypted_value}))


# --- tool calls ----------------------------------------------------------------------


def _set_call(turn: AssistantTurn, call: UIToolCall, **changes: Any) -> AssistantTurn:
    return turn.evolve(calls={**turn.calls, call.tool_call_id: call}, **changes)


def _open_call(
    turn: AssistantTurn, tool_call_id: str, name: str, parent_message_id: str | None
) -> AssistantTurn:
    """A new call and its ``tool`` part (a placeholder when the name is not known yet)."""
    call = UIToolCall(tool_call_id=tool_call_id, tool_name=name, run_state="input-streaming")
    changes = _adopt(turn, parent_message_id)
    return _push(
        turn,
        ToolPart(tool_call_id=tool_call_id),
        calls={**turn.calls, tool_call_id: call},
        **changes,
    )


def _tool_start(turn: AssistantTurn, event: ag.ToolCallStartEvent) -> AssistantTurn:
    call = turn.calls.get(event.tool_call_id)
    if call is None:
        return _open_call(turn, event.tool_call_id, event.tool_call_name, event.parent_message_id)
    # The placeholder opened by an earlier fragment is completed in place.
    return _set_call(turn, call.model_copy(update={"tool_name": event.tool_call_name}))


def _grow_args(turn: AssistantTurn, tool_call_id: str, delta: str) -> AssistantTurn:
    if not delta:
        return turn.evolve()
    args = turn.streaming_args
    chain: Chain = args.get(tool_call_id)
    if chain is None:
        call = turn.calls[tool_call_id]
        chain = (None, call.arguments) if call.arguments else None
    return turn.evolve(args={**args, tool_call_id: (chain, delta)})


def _tool_args(turn: AssistantTurn, event: ag.ToolCallArgsEvent) -> AssistantTurn:
    if event.tool_call_id not in turn.calls:
        turn = _open_call(turn, event.tool_call_id, "", None)
    return _grow_args(turn, event.tool_call_id, event.delta)


def _frozen_args(turn: AssistantTurn, call: UIToolCall) -> tuple[UIToolCall, dict[str, Chain]]:
    """The call with its streamed arguments joined, and the streams without it."""
    args = dict(turn.streaming_args)
    frozen = with_streamed_args(call, args)
    args.pop(call.tool_call_id, None)
    return frozen, args


def _tool_end(turn: AssistantTurn, event: ag.ToolCallEndEvent) -> AssistantTurn:
    call = turn.calls.get(event.tool_call_id)
    if call is None:
        return _warn(turn, f"TOOL_CALL_END for unknown tool call {event.tool_call_id!r} ignored")
    call, args = _frozen_args(turn, call)
    if call.run_state == "input-streaming":
        call = call.model_copy(update={"run_state": "input-available"})
    return _set_call(turn, call, args=args)


def _tool_result(turn: AssistantTurn, event: ag.ToolCallResultEvent) -> AssistantTurn:
    call = turn.calls.get(event.tool_call_id)
    if call is None:
        return _warn(turn, f"result for unknown tool call {event.tool_call_id!r} ignored")
    call, args = _frozen_args(turn, call)
    call = with_result(call, event.content)
    results = _appended(turn, "server_results", call.tool_call_id)
    return _set_call(turn, call, args=args, buckets=_buckets(turn, server_results=results))


# --- steps, data and citations -------------------------------------------------------


def _step_started(turn: AssistantTurn, event: ag.StepStartedEvent) -> AssistantTurn:
    number = turn.notes.get("steps", 0)
    step = StepInfo(step=number, name=event.step_name)
    part = StepStartPart(step=number, name=event.step_name)
    return _push(
        turn,
        part,
        buckets=_buckets(turn, steps=_appended(turn, "steps", step)),
        notes={**turn.notes, "steps": number + 1},
    )


def _step_finished(turn: AssistantTurn, event: ag.StepFinishedEvent) -> AssistantTurn:
    def open_step(step: StepInfo) -> bool:
        return step.name == event.step_name and not step.finished

    steps = turn.buckets.get("steps")
    found = chain_find(steps, open_step)
    if found is None:
        return _warn(turn, f"STEP_FINISHED for step {event.step_name!r} that is not open ignored")
    finished = found.model_copy(update={"finished": True})
    return turn.evolve(buckets=_buckets(turn, steps=chain_replace(steps, open_step, finished)))


def _data(turn: AssistantTurn, part: DataPart, old: DataPart | None) -> AssistantTurn:
    """Replace the data part ``old`` with ``part`` in place (in both chains), or append it."""
    if old is not None:

        def same(item: Any) -> bool:
            return item is old

        # Rebuilding both chains from the entry on costs O(parts after it).
        entries = chain_replace(turn.buckets.get("data_parts"), same, part)
        parts = chain_replace(turn.part_chain, same, part)
        return turn.evolve(parts=parts, buckets=_buckets(turn, data_parts=entries))
    return _push(turn, part, buckets=_buckets(turn, data_parts=_appended(turn, "data_parts", part)))


def _custom_data(turn: AssistantTurn, name: str, id: str) -> DataPart | None:
    """The data part a CUSTOM event ``(name, id)`` addresses: never an activity's."""
    activity = turn.notes.get("activities", {}).get((name, id))

    def addressed(entry: Any) -> bool:
        return (entry.name, entry.id) == (name, id) and entry is not activity

    found = chain_find(turn.buckets.get("data_parts"), addressed)
    return found if isinstance(found, DataPart) else None


def _cost(turn: AssistantTurn, value: Any) -> AssistantTurn:
    """Add a usage event's amounts to the turn's live cost channels."""
    try:
        report = UsageReport.model_validate(value)
    except ValidationError as exc:
        return _warn(turn, f"CUSTOM {USAGE_EVENT_NAME!r} not counted: {exc.errors()[0]['msg']}")
    buckets = turn.buckets
    # Rounded to nano-dollars, as the ledger keeps them: the sum does not drift.
    cost = round((buckets.get("cost_usd") or 0.0) + report.cost_usd, 9)
    savings = round((buckets.get("cache_savings_usd") or 0.0) + report.cache_savings_usd, 9)
    return turn.evolve(buckets=_buckets(turn, cost_usd=cost, cache_savings_usd=savings))


def _custom(turn: AssistantTurn, event: ag.CustomEvent) -> AssistantTurn:
    if event.name == USAGE_EVENT_NAME:
        turn = _cost(turn, event.value)
    channel = CHANNEL_EVENTS.get(event.name)
    if channel is not None:
        bucket, how = channel
        value = _appended(turn, bucket, event.value) if how == "append" else event.value
        turn = turn.evolve(buckets=_buckets(turn, **{bucket: value}))
    if event.name == CITATION_EVENT_NAME:
        citations = _appended(turn, "citations", event.value)
        return _push(
            turn, CitationPart(citation=event.value), buckets=_buckets(turn, citations=citations)
        )
    value = event.value
    # Only a string id addresses an entry: anything else crossed the wire as something else.
    data_id = value.get("id") if isinstance(value, dict) else None
    if not isinstance(data_id, str):
        return _data(turn, DataPart(name=event.name, payload=value), None)
    old = _custom_data(turn, event.name, data_id)
    return _data(turn, DataPart(name=event.name, id=data_id, payload=value), old)


# Activities and CUSTOM events address their own entries: an activity is a message of
# its own in stored history, so a CUSTOM event of the same name and id never replaces it
# (nor the reverse). ``notes["activities"]`` holds each activity's part by (type, id).


def _activity(turn: AssistantTurn, part: DataPart, old: DataPart | None) -> AssistantTurn:
    turn = _data(turn, part, old)
    activities = {**turn.notes.get("activities", {}), (part.name, part.id): part}
    return turn.evolve(notes={**turn.notes, "activities": activities})


def _activity_snapshot(turn: AssistantTurn, event: ag.ActivitySnapshotEvent) -> AssistantTurn:
    old = turn.notes.get("activities", {}).get((event.activity_type, event.message_id))
    if event.replace is False and old is not None:
        return turn.evolve()
    part = DataPart(name=event.activity_type, id=event.message_id, payload=event.content)
    return _activity(turn, part, old)


def _activity_delta(turn: AssistantTurn, event: ag.ActivityDeltaEvent) -> AssistantTurn:
    entry = turn.notes.get("activities", {}).get((event.activity_type, event.message_id))
    if entry is None:
        return _warn(turn, f"ACTIVITY_DELTA for unknown activity {event.message_id!r} ignored")
    operations = [wire_json(op) for op in event.patch]
    try:
        # A patched copy: the payload of the turn we were given must not change.
        payload = jsonpatch.apply_patch(copy.deepcopy(entry.payload), operations)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        return _warn(turn, f"ACTIVITY_DELTA for {event.message_id!r} does not apply: {exc}")
    return _activity(turn, entry.model_copy(update={"payload": payload}), entry)


# --- the run's end -------------------------------------------------------------------


def _sealed_all(turn: AssistantTurn) -> AssistantTurn:
    sealed = seal_assistant_turn(turn)
    return sealed if sealed is not turn else turn.evolve()


def _usage(event: ag.RunFinishedEvent | ag.RunErrorEvent) -> dict[str, Any]:
    return {"usage": tuple(wire_json(u) for u in event.usage)} if event.usage else {}


def _run_finished(turn: AssistantTurn, event: ag.RunFinishedEvent) -> AssistantTurn:
    turn = _sealed_all(turn)
    outcome = event.outcome
    reason = outcome.type if outcome is not None else "success"
    if reason != "cancelled":
        # A run that ended well ended its calls' arguments too, as the store records them.
        for call in list(turn.calls.values()):
            if call.run_state == "input-streaming":
                turn = _tool_end(turn, ag.ToolCallEndEvent(tool_call_id=call.tool_call_id))
    items: dict[str, Any] = {"finish_reason": reason, **_usage(event)}
    if event.result is not None:
        items["result"] = event.result
    calls = turn.calls
    interrupts = getattr(outcome, "interrupts", None)
    if interrupts:
        items["approvals"] = tuple(wire_json(interrupt) for interrupt in interrupts)
        gated = {i.tool_call_id for i in interrupts if i.tool_call_id in calls}
        if gated:
            calls = {
                key: call.model_copy(update={"state": "approval-requested"})
                if key in gated
                else call
                for key, call in calls.items()
            }
    return turn.evolve(calls=calls, buckets=_buckets(turn, **items))


def _run_error(turn: AssistantTurn, event: ag.RunErrorEvent) -> AssistantTurn:
    turn = _sealed_all(turn)
    # A call still streaming its arguments failed with the run, as the store records it.
    for call in list(turn.calls.values()):
        if call.run_state == "input-streaming":
            call, args = _frozen_args(turn, call)
            turn = _set_call(turn, with_result(call, "", is_error=True), args=args)
    error = TurnError(message=event.message, code=event.code)
    items: dict[str, Any] = {"error": error, **_usage(event)}
    if event.code == BUDGET_EXCEEDED_ERROR_CODE:
        items["budget_exceeded"] = True
    return turn.evolve(buckets=_buckets(turn, **items))


# --- sub-agents ----------------------------------------------------------------------


def _with_frame(turn: AssistantTurn, frame: SubAgentFrame) -> AssistantTurn:
    return turn.evolve(frames={**turn.frames, frame.subagent_run_id: frame})


def _frame(turn: AssistantTurn, subagent_run_id: str) -> SubAgentFrame:
    frame = turn.frames.get(subagent_run_id)
    if frame is None:
        # Attributed events before (or without) SUBAGENT_STARTED: the id is all we know.
        child = create_assistant_turn(subagent_run_id)
        frame = SubAgentFrame(subagent_run_id, (subagent_run_id,), turn.part_count, child)
    return frame


def _in_frame(turn: AssistantTurn, subagent_run_id: str, event: Any) -> AssistantTurn:
    frame = _frame(turn, subagent_run_id)
    return _with_frame(turn, frame.with_turn(_fold(frame.turn, event)))


def _subagent_started(turn: AssistantTurn, event: ag.SubagentStartedEvent) -> AssistantTurn:
    parent = turn.frames.get(event.parent_subagent_run_id or "")
    path = (*parent.agent_path, event.name) if parent is not None else (event.name,)
    frame = _frame(turn, event.subagent_run_id)
    opened = SubAgentFrame(
        event.subagent_run_id, path, frame.after_part, frame.turn, event.parent_tool_call_id
    )
    return _with_frame(turn, opened)


def _frame_ended(turn: AssistantTurn, subagent_run_id: str, **items: Any) -> AssistantTurn:
    """The sub-agent's frame sealed, with its end's readouts."""
    frame = _frame(turn, subagent_run_id)
    child = seal_assistant_turn(frame.turn)
    return _with_frame(turn, frame.with_turn(child.evolve(buckets=_buckets(child, **items))))


def _subagent_finished(turn: AssistantTurn, event: ag.SubagentFinishedEvent) -> AssistantTurn:
    items: dict[str, Any] = {"finish_reason": event.outcome.type if event.outcome else "success"}
    if event.result is not None:
        items["result"] = event.result
    return _frame_ended(turn, event.subagent_run_id, **items)


def _subagent_error(turn: AssistantTurn, event: ag.SubagentErrorEvent) -> AssistantTurn:
    error = TurnError(message=event.message, code=event.code)
    return _frame_ended(turn, event.subagent_run_id, error=error)


_HANDLERS_BY_NAME: dict[str, Handler] = {
    "TEXT_MESSAGE_START": _text_start,
    "TEXT_MESSAGE_CONTENT": _text_content,
    "TEXT_MESSAGE_CHUNK": _text_content,  # the delta of its run (codec.READING)
    "TEXT_MESSAGE_END": _text_end,
    "TOOL_CALL_START": _tool_start,
    "TOOL_CALL_ARGS": _tool_args,
    "TOOL_CALL_CHUNK": _tool_args,
    "TOOL_CALL_END": _tool_end,
    "TOOL_CALL_RESULT": _tool_result,
    "REASONING_START": _reasoning_start,
    "REASONING_MESSAGE_START": _reasoning_message_start,
    "REASONING_MESSAGE_CONTENT": _reasoning_content,
    "REASONING_MESSAGE_CHUNK": _reasoning_content,
    "REASONING_MESSAGE_END": _reasoning_message_end,
    "REASONING_END": _reasoning_end,
    "REASONING_ENCRYPTED_VALUE": _encrypted_value,
    "STEP_STARTED": _step_started,
    "STEP_FINISHED": _step_finished,
    "CUSTOM": _custom,
    "ACTIVITY_SNAPSHOT": _activity_snapshot,
    "ACTIVITY_DELTA": _activity_delta,
    "RUN_FINISHED": _run_finished,
    "RUN_ERROR": _run_error,
}
"""Every rule, by the event's wire type (explicit events only: see ``apply_event``)."""

_HANDLERS: dict[type, Handler] = {
    ag.TextMessageContentEvent: _text_content,
    ag.TextMessageChunkEvent: _text_content,
    ag.ToolCallArgsEvent: _tool_args,
    ag.ToolCallChunkEvent: _tool_args,
    ag.ReasoningMessageContentEvent: _reasoning_content,
    ag.ReasoningMessageChunkEvent: _reasoning_content,
    ag.ReasoningEndEvent: _reasoning_end,
}
"""The delta events by exact class: most of a stream, looked up without its type name."""

NOT_IN_THE_TURN = frozenset({"RUN_STARTED", "STATE_SNAPSHOT", "STATE_DELTA", "MESSAGES_SNAPSHOT"})
"""What the stream's reading lets through that a turn does not show: the run's start,
its shared state and the agent's view of the whole conversation."""

_SUBAGENT_HANDLERS: dict[str, Handler] = {
    "SUBAGENT_STARTED": _subagent_started,
    "SUBAGENT_FINISHED": _subagent_finished,
    "SUBAGENT_ERROR": _subagent_error,
}
