"""AG-UI streams for the chat engine's tests: a scripted turn and hypothesis strategies."""

from __future__ import annotations

from collections.abc import Iterable

from ag_ui.core import (
    ActivityDeltaEvent,
    ActivitySnapshotEvent,
    BaseEvent,
    CustomEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from hypothesis import strategies as st

from threadstore.chat import AssistantTurn, apply_event, create_assistant_turn

RUN = [RunStartedEvent(thread_id="t-1", run_id="r-1")]
END = [RunFinishedEvent(thread_id="t-1", run_id="r-1")]


def fold(events: Iterable[BaseEvent], turn_id: str = "turn-1") -> AssistantTurn:
    """Fold ``events`` into a fresh turn."""
    turn = create_assistant_turn(turn_id)
    for event in events:
        turn = apply_event(turn, event)
    return turn


def text(message_id: str, *deltas: str, subagent: str | None = None) -> list[BaseEvent]:
    """A streamed text message."""
    return [
        TextMessageStartEvent(message_id=message_id, subagent_run_id=subagent),
        *(
            TextMessageContentEvent(message_id=message_id, delta=d, subagent_run_id=subagent)
            for d in deltas
        ),
        TextMessageEndEvent(message_id=message_id, subagent_run_id=subagent),
    ]


def tool(
    call_id: str,
    name: str,
    *args: str,
    parent: str | None = None,
    result: str | None = None,
    subagent: str | None = None,
) -> list[BaseEvent]:
    """A streamed tool call, and its result when ``result`` is given."""
    events: list[BaseEvent] = [
        ToolCallStartEvent(
            tool_call_id=call_id,
            tool_call_name=name,
            parent_message_id=parent,
            subagent_run_id=subagent,
        ),
        *(ToolCallArgsEvent(tool_call_id=call_id, delta=a, subagent_run_id=subagent) for a in args),
        ToolCallEndEvent(tool_call_id=call_id, subagent_run_id=subagent),
    ]
    if result is not None:
        events.append(
            ToolCallResultEvent(
                message_id=f"{call_id}-result",
                tool_call_id=call_id,
                content=result,
                subagent_run_id=subagent,
            )
        )
    return events


def thinking(message_id: str, *deltas: str) -> list[BaseEvent]:
    """A reasoning span holding one streamed reasoning message."""
    return [
        ReasoningStartEvent(message_id=f"{message_id}-span"),
        ReasoningMessageStartEvent(message_id=message_id),
        *(ReasoningMessageContentEvent(message_id=message_id, delta=d) for d in deltas),
        ReasoningMessageEndEvent(message_id=message_id),
        ReasoningEndEvent(message_id=f"{message_id}-span"),
    ]


def text_tool_text() -> list[BaseEvent]:
    """The bar's stream: text, a tool call and its result, then text, under one message id."""
    return [
        *RUN,
        StepStartedEvent(step_name="answer"),
        *text("msg-1", "Let me ", "look that up."),
        *tool("call-1", "search", '{"q": ', '"weather"}', parent="msg-1", result="sunny"),
        *text("msg-1", "It is ", "sunny."),
        StepFinishedEvent(step_name="answer"),
        *END,
    ]


# --- hypothesis ------------------------------------------------------------------------

_ids = st.sampled_from(["a", "b", "c"])
_deltas = st.text(alphabet="xyz ⚡\n", max_size=6)


def _event() -> st.SearchStrategy[BaseEvent]:
    sub = st.none() | st.sampled_from(["sub-1", "sub-2"])
    return st.one_of(
        st.builds(TextMessageStartEvent, message_id=_ids, subagent_run_id=sub),
        st.builds(TextMessageContentEvent, message_id=_ids, delta=_deltas, subagent_run_id=sub),
        st.builds(TextMessageEndEvent, message_id=_ids, subagent_run_id=sub),
        st.builds(TextMessageChunkEvent, message_id=st.none() | _ids, delta=_deltas),
        st.builds(
            ToolCallStartEvent,
            tool_call_id=_ids,
            tool_call_name=st.sampled_from(["search", "fetch"]),
            subagent_run_id=sub,
        ),
        st.builds(ToolCallArgsEvent, tool_call_id=_ids, delta=_deltas, subagent_run_id=sub),
        st.builds(ToolCallEndEvent, tool_call_id=_ids),
        st.builds(ToolCallChunkEvent, tool_call_id=st.none() | _ids, delta=_deltas),
        st.builds(ToolCallResultEvent, message_id=_ids, tool_call_id=_ids, content=_deltas),
        st.builds(ReasoningMessageContentEvent, message_id=_ids, delta=_deltas),
        st.builds(ReasoningMessageChunkEvent, message_id=st.none() | _ids, delta=_deltas),
        st.builds(ReasoningMessageEndEvent, message_id=_ids),
        st.builds(ReasoningEndEvent, message_id=_ids),
        st.builds(
            ReasoningEncryptedValueEvent,
            subtype=st.sampled_from(["message", "tool-call"]),
            entity_id=_ids,
            encrypted_value=st.just("opaque"),
        ),
        st.builds(StepStartedEvent, step_name=_ids),
        st.builds(StepFinishedEvent, step_name=_ids),
        st.builds(
            CustomEvent,
            name=st.sampled_from(["status", "citation"]),
            value=st.fixed_dictionaries({"id": st.none() | _ids, "n": st.integers(0, 3)}),
        ),
        st.builds(
            ActivitySnapshotEvent,
            message_id=_ids,
            activity_type=st.just("plan"),
            content=st.fixed_dictionaries({"n": st.integers(0, 3)}),
        ),
        st.builds(
            ActivityDeltaEvent,
            message_id=_ids,
            activity_type=st.just("plan"),
            patch=st.just([{"op": "replace", "path": "/n", "value": 9}]),
        ),
        st.builds(
            SubagentStartedEvent,
            subagent_run_id=st.sampled_from(["sub-1", "sub-2"]),
            name=st.sampled_from(["researcher", "critic"]),
            parent_subagent_run_id=st.none() | st.just("sub-1"),
        ),
        st.builds(SubagentFinishedEvent, subagent_run_id=st.sampled_from(["sub-1", "sub-2"])),
        st.builds(RunErrorEvent, message=st.just("boom")),
        st.just(RunFinishedEvent(thread_id="t-1", run_id="r-1")),
    )


_subs = st.none() | st.sampled_from(["sub-1", "sub-2"])


def _segment() -> st.SearchStrategy[list[BaseEvent]]:
    """A well-formed piece of a stream, or one arbitrary event."""
    deltas = st.lists(_deltas, min_size=1, max_size=3)
    return st.one_of(
        st.builds(lambda i, d, s: text(i, *d, subagent=s), _ids, deltas, _subs),
        st.builds(
            lambda i, d, r, s: tool(i, "search", *d, result=r, subagent=s),
            _ids,
            deltas,
            st.none() | _deltas,
            _subs,
        ),
        st.builds(lambda i, d: thinking(i, *d), _ids, deltas),
        st.builds(lambda n: [StepStartedEvent(step_name=n), StepFinishedEvent(step_name=n)], _ids),
        st.builds(
            lambda i, n: [
                SubagentStartedEvent(subagent_run_id=i, name=n),
                TextMessageContentEvent(message_id="x", delta=n, subagent_run_id=i),
                SubagentFinishedEvent(subagent_run_id=i),
            ],
            st.sampled_from(["sub-1", "sub-2"]),
            st.sampled_from(["researcher", "critic"]),
        ),
        _event().map(lambda event: [event]),
    )


streams = st.lists(_segment(), max_size=10).map(lambda pieces: [e for p in pieces for e in p])
"""AG-UI streams: well-formed pieces and arbitrary events, interleaved, with sub-agents."""
