"""The turn reducer folds every AG-UI event family into ordered parts and readouts."""

from __future__ import annotations

from ag_ui.core import (
    ActivityDeltaEvent,
    ActivitySnapshotEvent,
    CustomEvent,
    Interrupt,
    RawEvent,
    ReasoningEncryptedValueEvent,
    ReasoningMessageChunkEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    StateSnapshotEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from chat_streams import END, RUN, fold, text, text_tool_text, thinking, tool
from threadstore.agui.legacy import (
    ThinkingEndEvent,
    ThinkingStartEvent,
    ThinkingTextMessageContentEvent,
    ThinkingTextMessageEndEvent,
    ThinkingTextMessageStartEvent,
)
from threadstore.chat import (
    CitationPart,
    DataPart,
    ReasoningPart,
    StepStartPart,
    TextPart,
    ToolPart,
    TurnError,
    apply_event,
    create_assistant_turn,
    seal_assistant_turn,
)


def kinds(turn: object) -> list[str]:
    return [part.type for part in turn.message.parts or ()]  # type: ignore[attr-defined]


def test_text_tool_result_text_under_one_message_id_keeps_the_tool_between_the_sentences() -> None:
    turn = fold(text_tool_text())

    message = turn.message
    assert kinds(turn) == ["step-start", "text", "tool", "text"]
    texts = [part.text for part in message.parts or () if isinstance(part, TextPart)]
    assert texts == ["Let me look that up.", "It is sunny."]
    assert message.content == "".join(texts)
    assert message.content.encode() == b"Let me look that up.It is sunny."
    assert message.id == "msg-1"  # the stream's message id is adopted
    (call,) = message.tool_calls or ()
    assert (call.tool_name, call.input, call.output, call.state) == (
        "search",
        {"q": "weather"},
        "sunny",
        "result",
    )
    assert turn.server_results == ("call-1",)
    assert all(part.state == "done" for part in message.parts or () if isinstance(part, TextPart))


def test_a_new_turn_has_no_bucket_and_no_parts_key() -> None:
    turn = create_assistant_turn("turn-1")

    assert turn.as_dict() == {
        "id": "turn-1",
        "message": {"id": "turn-1", "role": "assistant", "content": ""},
    }
    assert all(getattr(turn, name) is None for name in turn.BUCKETS)


def test_buckets_appear_only_when_their_event_arrives() -> None:
    turn = fold([*RUN, *text("m", "hi")])
    assert set(turn.as_dict()) == {"id", "message"}

    finished = apply_event(turn, END[0])
    assert set(finished.as_dict()) == {"id", "message", "finish_reason"}


def test_the_tail_streams_until_something_else_opens() -> None:
    turn = fold(
        [TextMessageStartEvent(message_id="m"), TextMessageContentEvent(message_id="m", delta="a")]
    )
    assert turn.message.parts == (TextPart(text="a", state="streaming"),)

    after = apply_event(
        fold([TextMessageContentEvent(message_id="m", delta="a")]),
        ToolCallStartEvent(tool_call_id="c", tool_call_name="f"),
    )
    assert after.message.parts == (TextPart(text="a", state="done"), ToolPart(tool_call_id="c"))


def test_a_truncated_stream_stays_streaming_until_sealed() -> None:
    turn = fold([*RUN, TextMessageContentEvent(message_id="m", delta="half an ans")])

    assert turn.message.parts == (TextPart(text="half an ans", state="streaming"),)
    sealed = seal_assistant_turn(turn)
    assert sealed.message.parts == (TextPart(text="half an ans", state="done"),)
    assert seal_assistant_turn(sealed) is sealed


def test_text_chunks_continue_the_last_chunked_message() -> None:
    turn = fold(
        [
            TextMessageChunkEvent(message_id="m", delta="one "),
            TextMessageChunkEvent(delta="two"),
        ]
    )

    assert turn.message.content == "one two"
    assert kinds(turn) == ["text"]


def test_text_of_other_roles_is_not_the_assistants() -> None:
    turn = fold(
        [
            TextMessageStartEvent(message_id="u", role="user"),
            TextMessageContentEvent(message_id="u", delta="not mine"),
            *text("m", "mine"),
        ]
    )

    assert turn.message.content == "mine"


def test_args_before_start_open_a_placeholder_that_start_completes_in_place() -> None:
    turn = fold(
        [
            ToolCallArgsEvent(tool_call_id="c", delta='{"a"'),
            ToolCallStartEvent(tool_call_id="c", tool_call_name="fetch"),
            ToolCallArgsEvent(tool_call_id="c", delta=": 1}"),
        ]
    )

    (call,) = turn.message.tool_calls or ()
    assert (call.tool_name, call.arguments, call.input, call.run_state) == (
        "fetch",
        '{"a": 1}',
        {"a": 1},
        "input-streaming",
    )
    assert kinds(turn) == ["tool"]
    ended = apply_event(turn, ToolCallEndEvent(tool_call_id="c"))
    assert ended.message.tool_calls[0].run_state == "input-available"  # type: ignore[index]


def test_tool_call_chunks_open_and_grow_one_call() -> None:
    turn = fold(
        [
            ToolCallChunkEvent(tool_call_id="c", tool_call_name="f", delta='{"x":'),
            ToolCallChunkEvent(delta="2}"),
        ]
    )

    (call,) = turn.message.tool_calls or ()
    assert (call.tool_name, call.input) == ("f", {"x": 2})


def test_a_result_for_an_unknown_call_is_a_warning() -> None:
    turn = fold([ToolCallResultEvent(message_id="r", tool_call_id="nope", content="x")])

    assert turn.warnings is not None and "nope" in turn.warnings[0]
    assert turn.message.tool_calls is None


def test_reasoning_and_its_encrypted_value_become_reasoning_parts() -> None:
    turn = fold(
        [
            *thinking("r", "think", "ing"),
            ReasoningEncryptedValueEvent(
                subtype="message", entity_id="r", encrypted_value="opaque"
            ),
            *text("m", "answer"),
        ]
    )

    parts = turn.message.parts or ()
    assert parts[:2] == (
        ReasoningPart(text="thinking", state="done"),
        ReasoningPart(text="opaque", encrypted=True, state="done"),
    )
    assert turn.message.reasoning == "thinking"  # the opaque payload is no display text


def test_a_lone_encrypted_value_is_not_shown_as_the_store_keeps_none() -> None:
    lone = ReasoningEncryptedValueEvent(subtype="message", entity_id="r9", encrypted_value="x")

    turn = fold([lone, *text("m", "answer"), lone])

    # Before anything of the agent's: nothing to attach it to. After: a part of the answer.
    assert kinds(turn) == ["text", "reasoning"]
    assert turn.warnings == ("encrypted value for 'r9' with no message ignored",)


def test_an_encrypted_value_naming_the_open_span_is_shown() -> None:
    turn = fold(
        [
            ReasoningStartEvent(message_id="r9"),
            ReasoningEncryptedValueEvent(subtype="message", entity_id="r9", encrypted_value="x"),
        ]
    )

    assert kinds(turn) == ["reasoning"] and turn.warnings is None


def test_reasoning_chunks_continue_the_last_chunked_reasoning_message() -> None:
    turn = fold(
        [
            ReasoningMessageChunkEvent(message_id="r", delta="step one, "),
            ReasoningMessageChunkEvent(delta="step two"),
            *text("m", "ok"),
        ]
    )

    assert turn.message.reasoning == "step one, step two"
    assert kinds(turn) == ["reasoning", "text"]


def test_an_encrypted_value_of_a_tool_call_lands_on_the_call() -> None:
    turn = fold(
        [
            *tool("c", "f"),
            ReasoningEncryptedValueEvent(subtype="tool-call", entity_id="c", encrypted_value="sig"),
        ]
    )

    assert turn.message.tool_calls[0].encrypted_value == "sig"  # type: ignore[index]


def test_the_deprecated_thinking_events_fold_as_reasoning() -> None:
    turn = fold(
        [
            ThinkingStartEvent(title="plan"),
            ThinkingTextMessageStartEvent(),
            ThinkingTextMessageContentEvent(delta="hmm"),
            ThinkingTextMessageEndEvent(),
            ThinkingEndEvent(),
            *text("m", "ok"),
        ]
    )

    assert turn.message.parts == (
        ReasoningPart(text="hmm", state="done"),
        TextPart(text="ok", state="done"),
    )


def test_steps_become_step_start_parts_and_step_readouts() -> None:
    turn = fold(text_tool_text())

    assert turn.message.parts[0] == StepStartPart(step=0, name="answer")  # type: ignore[index]
    assert [(s.step, s.name, s.finished) for s in turn.steps or ()] == [(0, "answer", True)]


def test_an_addressable_data_part_is_replaced_in_place() -> None:
    turn = fold(
        [
            CustomEvent(name="status", value={"id": "job", "pct": 10}),
            *text("m", "working"),
            CustomEvent(name="status", value={"id": "job", "pct": 90}),
            CustomEvent(name="status", value={"pct": 1}),
            CustomEvent(name="status", value={"id": 7, "pct": 2}),
        ]
    )

    parts = turn.message.parts or ()
    assert kinds(turn) == ["data", "text", "data", "data"]
    assert parts[0] == DataPart(name="status", id="job", payload={"id": "job", "pct": 90})
    assert [p.payload for p in turn.data_parts or ()] == [
        {"id": "job", "pct": 90},
        {"pct": 1},
        {"id": 7, "pct": 2},  # a non-string id does not address anything
    ]


def test_a_citation_event_is_a_citation_part() -> None:
    turn = fold([CustomEvent(name="citation", value={"url": "https://example.org"})])

    assert turn.message.parts == (CitationPart(citation={"url": "https://example.org"}),)
    assert turn.citations == ({"url": "https://example.org"},)


def test_activities_and_custom_events_address_only_their_own_parts() -> None:
    # Stored history keeps an activity as a message of its own and a CUSTOM part in the
    # parts order, so neither replaces the other, even with the same name and id.
    plan = {"op": "replace", "path": "/step", "value": 3}
    turn = fold(
        [
            ActivitySnapshotEvent(message_id="a", activity_type="plan", content={"step": 1}),
            CustomEvent(name="plan", value={"id": "a", "step": 2}),
            ActivityDeltaEvent(message_id="a", activity_type="plan", patch=[plan]),
            CustomEvent(name="plan", value={"id": "a", "step": 4}),
        ]
    )

    assert turn.message.parts == (
        DataPart(name="plan", id="a", payload={"step": 3}),
        DataPart(name="plan", id="a", payload={"id": "a", "step": 4}),
    )


def test_activities_snapshot_and_patch_one_data_part() -> None:
    turn = fold(
        [
            ActivitySnapshotEvent(message_id="a", activity_type="plan", content={"step": 1}),
            ActivityDeltaEvent(
                message_id="a",
                activity_type="plan",
                patch=[{"op": "replace", "path": "/step", "value": 2}],
            ),
            ActivitySnapshotEvent(
                message_id="a", activity_type="plan", content={"step": 0}, replace=False
            ),
        ]
    )

    assert turn.message.parts == (DataPart(name="plan", id="a", payload={"step": 2}),)


def test_a_patch_that_does_not_apply_is_a_warning_and_changes_nothing() -> None:
    before = fold([ActivitySnapshotEvent(message_id="a", activity_type="plan", content={})])
    after = apply_event(
        before,
        ActivityDeltaEvent(
            message_id="a", activity_type="plan", patch=[{"op": "remove", "path": "/missing"}]
        ),
    )

    assert after.data_parts == before.data_parts
    assert after.warnings is not None and len(after.warnings) == 1


def test_run_error_is_recorded_never_raised_and_seals_the_tail() -> None:
    turn = fold(
        [
            *RUN,
            TextMessageContentEvent(message_id="m", delta="par"),
            RunErrorEvent(message="model overloaded", code="OVERLOADED"),
        ]
    )

    assert turn.error == TurnError(message="model overloaded", code="OVERLOADED")
    assert turn.message.parts == (TextPart(text="par", state="done"),)


def test_run_finished_gives_usage_result_and_approvals() -> None:
    usage = [TokenUsage(input_tokens=3, output_tokens=5)]
    outcome = RunFinishedInterruptOutcome(
        interrupts=[Interrupt(id="i-1", reason="approval", tool_call_id="c")]
    )
    turn = fold(
        [
            *tool("c", "delete_repo"),
            RunFinishedEvent(thread_id="t", run_id="r", outcome=outcome, usage=usage, result=42),
        ]
    )

    assert turn.finish_reason == "interrupt"
    assert turn.result == 42
    assert turn.usage == ({"inputTokens": 3, "outputTokens": 5},)
    assert turn.approvals is not None and turn.approvals[0]["toolCallId"] == "c"
    assert turn.message.tool_calls[0].state == "approval-requested"  # type: ignore[index]


def test_sub_agent_events_fold_into_their_own_frame_never_into_the_parents_parts() -> None:
    turn = fold(
        [
            *tool("delegate", "research", parent="m"),
            SubagentStartedEvent(
                subagent_run_id="s1", name="researcher", parent_tool_call_id="delegate"
            ),
            *text("sm", "child prose", subagent="s1"),
            *tool("child-call", "search", subagent="s1"),
            SubagentStartedEvent(subagent_run_id="s2", name="critic", parent_subagent_run_id="s1"),
            TextMessageContentEvent(message_id="sm2", delta="nested", subagent_run_id="s2"),
            SubagentFinishedEvent(subagent_run_id="s1", result="done"),
            *text("m", "parent prose"),
            *END,
        ]
    )

    assert turn.message.content == "parent prose"
    assert [c.tool_call_id for c in turn.message.tool_calls or ()] == ["delegate"]
    first, second = turn.sub_agents or ()
    assert (first.agent_path, first.after_part, first.parent_tool_call_id) == (
        ("researcher",),
        1,
        "delegate",
    )
    assert first.turn.message.content == "child prose"
    assert kinds(first.turn) == ["text", "tool"]
    assert (first.turn.finish_reason, first.turn.result) == ("success", "done")
    assert second.agent_path == ("researcher", "critic")
    # Sealed alongside the parent at RUN_FINISHED.
    assert second.turn.message.parts == (TextPart(text="nested", state="done"),)


def test_a_sub_agent_error_is_recorded_on_its_frame() -> None:
    turn = fold(
        [
            SubagentStartedEvent(subagent_run_id="s", name="r"),
            SubagentErrorEvent(subagent_run_id="s", message="child failed"),
        ]
    )

    (frame,) = turn.sub_agents or ()
    assert frame.turn.error == TurnError(message="child failed")
    assert turn.error is None


def test_unknown_and_run_scoped_state_events_are_ignored() -> None:
    turn = fold(text_tool_text())
    after = apply_event(
        apply_event(turn, StateSnapshotEvent(snapshot={"a": 1})), RawEvent(event={})
    )

    assert after is not turn
    assert after.as_dict() == turn.as_dict()


def test_the_seed_engine_s_channels_fill_from_their_custom_events() -> None:
    fresh = fold([*RUN])
    assert (fresh.plan, fresh.activity, fresh.verifications, fresh.false_finishes) == (
        None,
        None,
        None,
        None,
    )
    assert not {"plan", "activity", "verifications", "false_finishes"} & set(fresh.as_dict())

    turn = fold(
        [
            *RUN,
            CustomEvent(name="plan-update", value={"steps": ["search"]}),
            CustomEvent(name="activity", value="searching"),
            CustomEvent(name="verification", value={"step": 0, "ok": False}),
            CustomEvent(name="plan-update", value={"steps": ["search", "answer"]}),
            CustomEvent(name="false-finish", value={"reason": "no answer yet"}),
            CustomEvent(name="verification", value={"step": 1, "ok": True}),
            CustomEvent(name="activity", value="writing"),
        ]
    )

    assert turn.plan == {"steps": ["search", "answer"]}  # the latest snapshot
    assert turn.activity == "writing"
    assert turn.verifications == ({"step": 0, "ok": False}, {"step": 1, "ok": True})
    assert turn.false_finishes == ({"reason": "no answer yet"},)
    assert len(turn.data_parts or ()) == 7  # each is a data part too, as stored history keeps
    assert turn.as_dict()["false_finishes"] == [{"reason": "no answer yet"}]


def test_a_sub_agent_s_channels_stay_in_its_frame() -> None:
    turn = fold(
        [
            *RUN,
            SubagentStartedEvent(subagent_run_id="s", name="researcher"),
            CustomEvent(name="plan-update", value=["look"], subagent_run_id="s"),
        ]
    )

    assert turn.plan is None
    (frame,) = turn.sub_agents or ()
    assert frame.turn.plan == ["look"]
