"""The pure fold: AG-UI events -> one run's records, tested on plain data."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

import pytest
from ag_ui.core import (
    ActivityDeltaEvent,
    ActivitySnapshotEvent,
    AssistantMessage,
    BaseEvent,
    CustomEvent,
    FunctionCall,
    MessagesSnapshotEvent,
    RawEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from ag_ui.core import ToolCall as AguiToolCall
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agui_scripts import (
    full_turn,
    reasoning,
    run_finished,
    run_started,
    state_delta,
    state_snapshot,
    text_message,
    tool_call,
)
from threadstore.agui.legacy import (
    ThinkingEndEvent,
    ThinkingStartEvent,
    ThinkingTextMessageContentEvent,
    ThinkingTextMessageEndEvent,
    ThinkingTextMessageStartEvent,
)
from threadstore.fold import (
    ContentBuffer,
    ConversationFold,
    FoldRecord,
    RecordKind,
    stored_ids,
)
from threadstore.models import (
    MAX_DATA_NAME_CHARS,
    MAX_DATA_PAYLOAD_BYTES,
    MAX_DATA_PAYLOAD_DEPTH,
    Message,
    MessageStatus,
    Role,
    RunStatus,
    ToolCall,
)

COMPLETE, ACTIVE = MessageStatus.COMPLETE, MessageStatus.ACTIVE


def fold_of(*events: BaseEvent, history: list[Message] | None = None) -> ConversationFold:
    fold = ConversationFold("run-1", thread_id="thread-1", history=history or [])
    for event in events:
        fold.apply(event)
    return fold


def messages(fold: ConversationFold) -> list[FoldRecord]:
    return [r for r in fold.records.values() if r.kind is RecordKind.MESSAGE and r.owned]


def stored_message(agui_id: str, role: Role = Role.ASSISTANT, **fields: Any) -> Message:
    return Message(message_uuid=uuid4(), chat_uuid=uuid4(), agui_id=agui_id, role=role, **fields)


def stored_call(message: Message, tool_call_id: str, **fields: Any) -> ToolCall:
    call = ToolCall(
        uuid=uuid4(), message_uuid=message.message_uuid, tool_call_id=tool_call_id, name="search"
    )
    return call.model_copy(update=fields)


# --- text -------------------------------------------------------------------------------------


def test_text_deltas_accumulate_into_one_complete_message() -> None:
    fold = ConversationFold("run-1")
    events = text_message("m1", "Hello, world!", deltas=4)
    boundaries = [fold.apply(event) for event in events]

    (message,) = messages(fold)
    assert (message.role, message.agui_id, message.content) == (
        Role.ASSISTANT,
        "m1",
        "Hello, world!",
    )
    assert (message.status, message.in_progress) == (COMPLETE, False)
    assert boundaries == [True, False, False, False, False, True]


def test_content_buffer_keeps_every_delta_across_reads() -> None:
    buffer = ContentBuffer("a")
    for delta in "bcd":
        buffer.append(delta)
    assert buffer.text == "abcd"
    buffer.append("")
    buffer.append("e")
    assert buffer.text == "abcde"
    buffer.replace("z")
    buffer.append("y")
    assert buffer.text == "zy"


def test_text_message_role_and_name_come_from_the_start_event() -> None:
    fold = fold_of(TextMessageStartEvent(message_id="m1", role="user", name="Ann"))
    (message,) = messages(fold)
    assert (message.role, message.name) == (Role.USER, "Ann")


def test_text_chunks_open_continue_and_close_messages() -> None:
    fold = fold_of(
        TextMessageChunkEvent(message_id="m1", delta="Hel"),
        TextMessageChunkEvent(delta="lo"),
        TextMessageChunkEvent(message_id="m2", delta="Bye"),
    )
    first, second = messages(fold)
    assert (first.content, first.status) == ("Hello", COMPLETE)
    assert (second.content, second.status) == ("Bye", ACTIVE)

    fold.apply(run_finished())
    assert second.status is COMPLETE


def test_a_chunk_without_any_id_opens_a_message_named_for_the_run_and_warns() -> None:
    # The stream's one reading names it, so the live turn and the reconnect snapshot
    # refer to the same message the store keeps.
    fold = fold_of(TextMessageChunkEvent(delta="orphan"))
    (message,) = messages(fold)
    assert (message.agui_id, message.content) == ("text-run-1-1", "orphan")
    (warning,) = fold.take_changes().warnings
    assert "without an id" in warning


# --- tool calls -------------------------------------------------------------------------------


def test_tool_call_nests_in_the_message_named_by_parent_message_id() -> None:
    fold = fold_of(
        *text_message("m1", "Checking."),
        *text_message("m2", "Other."),
        *tool_call("c1", "search", '{"q": "x"}', parent_message_id="m1", result="found"),
    )
    call = fold.tool_call("c1")
    assert call is not None
    assert call.parent_key == fold.records["m:m1"].key
    assert (call.name, call.content, call.result, call.status) == (
        "search",
        '{"q": "x"}',
        "found",
        COMPLETE,
    )
    assert call.result_message_id == "c1-result"


def test_tool_call_naming_an_unknown_parent_opens_an_assistant_message_with_that_id() -> None:
    fold = ConversationFold("run-1")
    fold.apply(
        ToolCallStartEvent(tool_call_id="c1", tool_call_name="search", parent_message_id="p")
    )
    (container,) = messages(fold)
    assert (container.agui_id, container.role, container.status) == ("p", Role.ASSISTANT, ACTIVE)

    fold.apply(ToolCallEndEvent(tool_call_id="c1"))
    assert container.status is COMPLETE  # it held only that call

    for event in text_message("p", "Now with text."):
        fold.apply(event)
    assert (container.content, container.status) == ("Now with text.", COMPLETE)
    assert len(messages(fold)) == 1


def test_tool_call_without_parent_joins_the_last_assistant_message() -> None:
    fold = fold_of(*text_message("m1", "Let me look."), *tool_call("c1", "search", "{}"))
    call = fold.tool_call("c1")
    assert call is not None and call.parent_key == "m:m1"
    assert len(messages(fold)) == 1


def test_tool_call_after_reasoning_joins_the_message_holding_the_reasoning() -> None:
    fold = fold_of(
        *text_message("m1", "First."),
        *reasoning("r1", "Think again."),
        *tool_call("c1", "search", "{}"),
    )
    text, container = messages(fold)
    call, step = fold.tool_call("c1"), fold.reasoning("r1")
    assert call is not None and call.parent_key == container.key
    assert step is not None and step.parent_key == container.key
    assert (container.role, container.agui_id) == (Role.ASSISTANT, None)
    assert text.agui_id == "m1" and fold.children(text) == []


def test_tool_call_chunks_stream_arguments_until_another_event() -> None:
    fold = fold_of(
        ToolCallChunkEvent(tool_call_id="c1", tool_call_name="search", delta='{"q"'),
        ToolCallChunkEvent(delta=': "x"}'),
        ToolCallChunkEvent(tool_call_id="c2", tool_call_name="fetch", delta="{}"),
        run_finished(),
    )
    first, second = fold.tool_call("c1"), fold.tool_call("c2")
    assert first is not None and second is not None
    assert (first.content, first.name, first.status) == ('{"q": "x"}', "search", COMPLETE)
    assert (second.content, second.status) == ("{}", COMPLETE)
    assert first.parent_key == second.parent_key


def test_tool_result_answers_a_stored_call_that_had_no_result() -> None:
    asked = stored_message("a0")
    pending = stored_call(asked, "c0", status=MessageStatus.INTERRUPTED, in_progress=False)
    asked.tool_calls = [pending]
    fold = fold_of(
        ToolCallResultEvent(message_id="res0", tool_call_id="c0", content="42"),
        history=[asked],
    )
    call = fold.tool_call("c0")
    assert call is not None
    assert (call.owned, call.uuid, call.result, call.status) == (
        False,
        pending.uuid,
        "42",
        COMPLETE,
    )
    assert messages(fold) == []
    assert fold.finish(MessageStatus.INTERRUPTED) == []


def test_tool_call_may_nest_in_an_assistant_message_stored_earlier() -> None:
    earlier = stored_message("a0")
    fold = fold_of(*tool_call("c1", "search", "{}", parent_message_id="a0"), history=[earlier])
    call = fold.tool_call("c1")
    assert call is not None
    parent = fold.records[call.parent_key or ""]
    assert (parent.owned, parent.uuid) == (False, earlier.message_uuid)
    assert messages(fold) == []


def test_multi_part_tool_results_with_media_are_kept_as_json() -> None:
    result = ToolCallResultEvent.model_validate(
        {
            "messageId": "r",
            "toolCallId": "c1",
            "content": [
                {"type": "text", "text": "chart"},
                {"type": "image", "source": {"type": "url", "value": "https://x/y.png"}},
            ],
        }
    )
    fold = fold_of(*tool_call("c1", "plot", "{}"), result)
    call = fold.tool_call("c1")
    assert call is not None and call.result is not None
    assert '"https://x/y.png"' in call.result
    assert call.metadata["result_content_parts"] is True


# --- reasoning ---------------------------------------------------------------------------


def test_reasoning_before_any_text_nests_in_the_assistant_message_that_follows() -> None:
    fold = fold_of(*reasoning("r1", "Let me think.", deltas=3))
    (message,) = messages(fold)
    (step,) = fold.children(message)
    assert (message.role, message.agui_id, message.content) == (Role.ASSISTANT, None, "")
    assert (step.kind, step.agui_id, step.content) == (RecordKind.REASONING, "r1", "Let me think.")
    assert message.status is COMPLETE and step.status is COMPLETE

    for event in text_message("m1", "The answer."):
        fold.apply(event)

    (answer,) = messages(fold)  # the answer took the message holding its reasoning
    assert answer is message and fold.message("m1") is message
    assert (answer.agui_id, answer.content, answer.status) == ("m1", "The answer.", COMPLETE)
    assert fold.children(answer) == [step]


def test_reasoning_while_an_answer_streams_nests_in_that_answer() -> None:
    fold = fold_of(
        TextMessageStartEvent(message_id="m1"),
        TextMessageContentEvent(message_id="m1", delta="Hmm. "),
        *reasoning("r1", "Think."),
        TextMessageContentEvent(message_id="m1", delta="Yes."),
        TextMessageEndEvent(message_id="m1"),
    )
    (answer,) = messages(fold)
    assert [c.key for c in fold.children(answer)] == ["r:r1"]
    assert answer.content == "Hmm. Yes."
    kinds = [(e["type"], e["n"]) for e in answer.metadata["parts"]]
    step = fold.reasoning("r1")
    assert step is not None and kinds == [("text", 0), ("text", 2)]
    assert [e["n"] for e in step.metadata["parts"]] == [1]  # between the two text segments


def test_reasoning_messages_inside_a_span_end_with_the_span() -> None:
    fold = fold_of(
        ReasoningStartEvent(message_id="span"),
        ReasoningMessageChunkEvent(message_id="r1", delta="a"),
        ReasoningMessageContentEvent(message_id="r1", delta="b"),
        ReasoningEndEvent(message_id="span"),
    )
    (message,) = messages(fold)
    (step,) = fold.children(message)
    assert (step.content, step.status, message.status) == ("ab", COMPLETE, COMPLETE)
    assert step.metadata["reasoning_span_id"] == "span"


def test_encrypted_values_land_on_the_reasoning_step_message_or_tool_call() -> None:
    fold = fold_of(
        *reasoning("r1", "hidden"),
        *text_message("m1", "Answer."),
        *tool_call("c1", "search", "{}"),
        ReasoningEncryptedValueEvent(subtype="message", entity_id="r1", encrypted_value="E1"),
        ReasoningEncryptedValueEvent(subtype="message", entity_id="m1", encrypted_value="E2"),
        ReasoningEncryptedValueEvent(subtype="tool-call", entity_id="c1", encrypted_value="E3"),
    )
    step, message, call = fold.reasoning("r1"), fold.message("m1"), fold.tool_call("c1")
    assert step is not None and message is not None and call is not None
    assert (step.encrypted_value, message.encrypted_value) == ("E1", "E2")
    assert call.metadata["encrypted_value"] == "E3"
    assert fold.message("r1") is None  # a reasoning step, not a message of its own


def test_a_lone_encrypted_value_stores_nothing() -> None:
    fold = ConversationFold("run-1")
    fold.apply(run_started())
    fold.apply(ReasoningEncryptedValueEvent(subtype="message", entity_id="r9", encrypted_value="E"))
    fold.apply(run_finished())

    assert fold.records == {}  # no anonymous assistant message opened for it
    (warning,) = fold.take_changes().warnings
    assert "encrypted value for unknown message 'r9' with no message; ignored" in warning


def test_an_encrypted_value_after_the_agents_message_nests_in_a_reasoning_step() -> None:
    fold = ConversationFold("run-1")
    fold.apply(TextMessageStartEvent(message_id="m1"))
    fold.apply(TextMessageContentEvent(message_id="m1", delta="Hi."))
    fold.apply(ReasoningEncryptedValueEvent(subtype="message", entity_id="r9", encrypted_value="E"))
    fold.apply(run_finished())

    message = fold.message("m1")
    assert message is not None
    (step,) = fold.children(message)
    assert step.encrypted_value == "E"


def test_an_encrypted_value_alone_in_a_span_becomes_a_nested_reasoning_step() -> None:
    fold = fold_of(
        ReasoningStartEvent(message_id="r9"),
        ReasoningEncryptedValueEvent(subtype="message", entity_id="r9", encrypted_value="E"),
        ReasoningEndEvent(message_id="r9"),
    )
    (message,) = messages(fold)
    (step,) = fold.children(message)
    assert (message.role, step.encrypted_value, step.status) == (Role.ASSISTANT, "E", COMPLETE)
    assert fold.take_changes().warnings == []


def test_deprecated_thinking_events_fold_like_reasoning_with_the_title_as_name() -> None:
    fold = fold_of(
        run_started(),
        ThinkingStartEvent(title="Planning"),
        ThinkingTextMessageStartEvent(),
        ThinkingTextMessageContentEvent(delta="First, "),
        ThinkingTextMessageContentEvent(delta="look."),
        ThinkingTextMessageEndEvent(),
        ThinkingEndEvent(),
    )
    (message,) = messages(fold)
    (step,) = fold.children(message)
    assert (message.role, step.name, step.content, step.status) == (
        Role.ASSISTANT,
        "Planning",
        "First, look.",
        COMPLETE,
    )
    assert step.agui_id is not None and step.agui_id.startswith("thinking-run-1-")


# --- steps, state, activities --------------------------------------------------------------


def test_records_carry_the_innermost_step_they_were_opened_in() -> None:
    fold = fold_of(
        StepStartedEvent(step_name="plan"),
        *text_message("m1", "a"),
        StepStartedEvent(step_name="act"),
        *tool_call("c1", "search", "{}", parent_message_id="m1"),
        StepFinishedEvent(step_name="act"),
        *text_message("m2", "b"),
        StepFinishedEvent(step_name="plan"),
        *text_message("m3", "c"),
    )
    steps = {key: r.step_name for key, r in fold.records.items()}
    assert steps == {"m:m1": "plan", "t:c1": "act", "m:m2": "plan", "m:m3": None}


def test_state_snapshot_then_delta_give_the_latest_state() -> None:
    initial = {"n": 1}
    fold = ConversationFold("run-1", state=initial)
    fold.apply(state_delta({"op": "replace", "path": "/n", "value": 2}))
    assert (fold.state, initial) == ({"n": 2}, {"n": 1})
    fold.apply(state_snapshot({"items": []}))
    fold.apply(state_delta({"op": "add", "path": "/items/-", "value": "x"}))
    assert fold.state == {"items": ["x"]}
    assert fold.state_version == 3


def test_a_state_delta_that_does_not_apply_is_skipped_with_a_warning() -> None:
    fold = fold_of(
        state_snapshot({"a": 1}),
        state_delta({"op": "add", "path": "/b", "value": 2}, {"op": "remove", "path": "/missing"}),
    )
    assert fold.state == {"a": 1}
    assert fold.state_version == 1
    assert any("STATE_DELTA" in w for w in fold.take_changes().warnings)


def test_activities_are_stored_as_activity_messages_and_patched() -> None:
    fold = fold_of(
        ActivitySnapshotEvent(message_id="act", activity_type="search", content={"done": 0}),
        ActivityDeltaEvent(
            message_id="act",
            activity_type="search",
            patch=[{"op": "replace", "path": "/done", "value": 3}],  # type: ignore[list-item]
        ),
        ActivitySnapshotEvent(
            message_id="act", activity_type="search", content={"done": 99}, replace=False
        ),
    )
    (message,) = messages(fold)
    assert (message.role, message.activity_type, message.activity_content) == (
        Role.ACTIVITY,
        "search",
        {"done": 3},
    )


# --- snapshots -----------------------------------------------------------------------------


def test_messages_snapshot_stores_only_messages_not_already_known() -> None:
    stored = stored_message("u0", Role.USER, content="hi")
    fold = fold_of(
        *text_message("m1", "streamed"),
        *tool_call("c1", "search", "{}", parent_message_id="m1"),
        MessagesSnapshotEvent(
            messages=[
                UserMessage(id="u0", content="hi"),
                AssistantMessage(id="m1", content="streamed"),
                ToolMessage(id="t1", tool_call_id="c1", content="found"),
                AssistantMessage(
                    id="m2",
                    content="new",
                    tool_calls=[
                        AguiToolCall(id="c2", function=FunctionCall(name="f", arguments="{}"))
                    ],
                ),
            ]
        ),
        history=[stored],
    )
    streamed, new = messages(fold)
    assert (streamed.agui_id, streamed.content) == ("m1", "streamed")
    assert (new.agui_id, new.content, new.status) == ("m2", "new", COMPLETE)
    first_call, second_call = fold.tool_call("c1"), fold.tool_call("c2")
    assert first_call is not None and (first_call.result, first_call.result_message_id) == (
        "found",
        "t1",
    )
    assert second_call is not None and second_call.parent_key == new.key


def test_stored_ids_cover_everything_a_client_may_echo() -> None:
    asked = stored_message("a1")
    call = stored_call(asked, "c1", content="done")
    asked.tool_calls = [call]
    ids = stored_ids([asked])
    assert {"a1", str(asked.message_uuid), "c1", str(call.uuid), "c1-result"} <= ids


def test_an_id_already_stored_in_the_chat_is_not_reused() -> None:
    fold = fold_of(*text_message("old", "again"), history=[stored_message("old")])
    (message,) = messages(fold)
    assert (message.agui_id, message.metadata["duplicate_agui_id"], message.content) == (
        None,
        "old",
        "again",
    )


# --- run outcome -------------------------------------------------------------------------------


def test_run_finished_completes_active_records_and_keeps_usage_on_the_last_message() -> None:
    fold = fold_of(
        run_started(),
        TextMessageStartEvent(message_id="m1"),
        TextMessageContentEvent(message_id="m1", delta="partial"),
        RunFinishedEvent(
            thread_id="thread-1",
            run_id="run-1",
            result={"ok": True},
            usage=[TokenUsage(model="m", input_tokens=3, output_tokens=5)],
        ),
    )
    (message,) = messages(fold)
    assert message.status is COMPLETE
    assert message.metadata["run_finished"] == {
        "usage": [{"model": "m", "input_tokens": 3, "output_tokens": 5}],
        "result": {"ok": True},
    }
    assert fold.run.status is RunStatus.COMPLETE


def test_a_cancelled_outcome_interrupts_the_active_records() -> None:
    fold = fold_of(
        TextMessageStartEvent(message_id="m1"),
        RunFinishedEvent.model_validate(
            {"threadId": "t", "runId": "run-1", "outcome": {"type": "cancelled"}}
        ),
    )
    (message,) = messages(fold)
    assert message.status is MessageStatus.INTERRUPTED
    assert message.metadata["run_finished"]["outcome"] == {"type": "cancelled"}
    assert fold.run.status is RunStatus.INTERRUPTED


def test_run_error_marks_active_records_errored_and_keeps_the_error() -> None:
    fold = fold_of(
        *text_message("m1", "done"),
        TextMessageStartEvent(message_id="m2"),
        RunErrorEvent(message="boom", code="E42"),
    )
    done, broken = messages(fold)
    assert (done.status, broken.status) == (COMPLETE, MessageStatus.ERRORED)
    assert broken.metadata["run_error"] == {"message": "boom", "code": "E42"}
    assert (fold.run.status, fold.run.error) == (RunStatus.ERRORED, "boom")


def test_finish_gives_every_still_active_record_the_run_status() -> None:
    fold = fold_of(
        *text_message("m1", "done"),
        TextMessageStartEvent(message_id="m2"),
        ToolCallStartEvent(tool_call_id="c1", tool_call_name="f", parent_message_id="m2"),
    )
    closed = fold.finish(MessageStatus.INTERRUPTED)
    assert {r.key for r in closed} == {"m:m2", "t:c1"}
    assert {r.key: r.status for r in fold.records.values()} == {
        "m:m1": COMPLETE,
        "m:m2": MessageStatus.INTERRUPTED,
        "t:c1": MessageStatus.INTERRUPTED,
    }


# --- subagents, custom, raw ----------------------------------------------------------------


def test_subagent_records_are_attributed_and_end_with_the_subagent() -> None:
    fold = fold_of(
        *tool_call("c1", "delegate", "{}"),
        SubagentStartedEvent(subagent_run_id="s1", name="researcher", parent_tool_call_id="c1"),
        TextMessageStartEvent(message_id="sm1", subagent_run_id="s1"),
        TextMessageStartEvent(message_id="sm2", subagent_run_id="s2"),
        TextMessageStartEvent(message_id="pm", role="assistant"),
        SubagentFinishedEvent(subagent_run_id="s1"),
        SubagentErrorEvent(subagent_run_id="s2", message="lost"),
    )
    first, second, parent = (fold.message(i) for i in ("sm1", "sm2", "pm"))
    assert first is not None and second is not None and parent is not None
    assert first.metadata == {"subagent_run_id": "s1", "subagent_name": "researcher"}
    assert (first.status, second.status, parent.status) == (COMPLETE, MessageStatus.ERRORED, ACTIVE)
    assert second.metadata["subagent_error"] == {"message": "lost"}
    call = fold.tool_call("c1")
    assert call is not None and call.metadata["subagent_run_ids"] == ["s1"]


def test_raw_events_change_nothing_not_even_an_open_chunk_run() -> None:
    fold = ConversationFold("run-1")
    fold.apply(TextMessageChunkEvent(message_id="m1", delta="a"))
    fold.take_dirty()
    assert not fold.apply(RawEvent(event={"provider": "thing"}))
    fold.apply(TextMessageChunkEvent(delta="b"))  # the chunk run goes on: the same message
    assert [(r.key, r.content, r.status) for r in fold.records.values()] == [("m:m1", "ab", ACTIVE)]


def parts_of(record: FoldRecord | None) -> list[dict[str, Any]]:
    assert record is not None
    parts: list[dict[str, Any]] = record.metadata.get("parts", [])
    return parts


def test_custom_events_are_parts_of_the_current_message_with_their_payload() -> None:
    fold = ConversationFold("run-1")
    assert fold.apply(CustomEvent(name="status", value={"id": "job", "pct": 10}))  # no message yet
    fold.apply(TextMessageStartEvent(message_id="m1"))
    fold.apply(TextMessageContentEvent(message_id="m1", delta="Hello"))
    fold.apply(CustomEvent(name="citation", value={"url": "https://example.org"}))
    fold.apply(TextMessageContentEvent(message_id="m1", delta=" again"))  # a new segment
    fold.apply(TextMessageEndEvent(message_id="m1"))
    fold.apply(TextMessageStartEvent(message_id="m2"))
    fold.take_dirty()
    # Same name and string id: the entry on m1 is replaced in place, and m1 written again.
    assert fold.apply(CustomEvent(name="status", value={"id": "job", "pct": 90}))
    assert [r.key for r in fold.take_dirty()] == ["m:m1"]
    fold.apply(CustomEvent(name="status", value={"id": 7, "pct": 1}))  # not a string id: new
    fold.apply(CustomEvent(name="note", value="plain", subagent_run_id="sub"))  # the sub-agent's

    assert parts_of(fold.message("m1")) == [
        {
            "n": 0,
            "type": "data",
            "name": "status",
            "id": "job",
            "payload": {"id": "job", "pct": 90},
        },
        {"n": 1, "type": "text", "start": 0},
        {"n": 2, "type": "citation", "citation": {"url": "https://example.org"}},
        {"n": 3, "type": "text", "start": 5},
    ]
    assert parts_of(fold.message("m2")) == [
        {"n": 4, "type": "data", "name": "status", "payload": {"id": 7, "pct": 1}}
    ]


def test_custom_parts_of_a_run_with_no_message_of_the_agents_are_not_stored() -> None:
    # As the seed layer: an event with no message to attach it to stores nothing.
    fold = ConversationFold("run-1")
    fold.apply(StepStartedEvent(step_name="plan"))
    fold.apply(CustomEvent(name="card", value={"title": "Hi"}))
    fold.apply(run_finished())

    assert fold.records == {}
    assert fold.take_changes().warnings == ["1 CUSTOM part(s) not stored: the run wrote no message"]


def test_custom_parts_after_the_agents_message_ended_stay_on_it() -> None:
    fold = ConversationFold("run-1")
    fold.apply(TextMessageStartEvent(message_id="m1"))
    fold.apply(TextMessageContentEvent(message_id="m1", delta="Done."))
    fold.apply(TextMessageEndEvent(message_id="m1"))
    fold.apply(TextMessageStartEvent(message_id="u2", role="user"))
    fold.apply(CustomEvent(name="card", value=1))
    fold.apply(run_finished())

    assert [e.get("payload") for e in parts_of(fold.message("m1"))] == [None, 1]
    assert parts_of(fold.message("u2")) == []


def test_a_user_message_in_the_run_does_not_take_the_agents_parts() -> None:
    fold = ConversationFold("run-1")
    fold.apply(CustomEvent(name="card", value=1))
    fold.apply(TextMessageStartEvent(message_id="u1", role="user"))
    fold.apply(CustomEvent(name="card", value=2))
    fold.apply(TextMessageStartEvent(message_id="m1"))

    assert parts_of(fold.message("u1")) == []
    assert [e["payload"] for e in parts_of(fold.message("m1"))] == [1, 2]


def test_steps_alone_still_open_no_message() -> None:
    fold = ConversationFold("run-1")
    fold.apply(StepStartedEvent(step_name="plan"))
    fold.apply(run_finished())
    assert fold.records == {}


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("x" * MAX_DATA_PAYLOAD_BYTES, "bytes of JSON; the limit is"),
        (nested(MAX_DATA_PAYLOAD_DEPTH + 1), "nested more than"),
        (nested(5000), "nested more than"),
        ({"n": float("nan")}, "not JSON"),
        ({"n": object()}, "not JSON"),
        ({"text": "a\x00b"}, "NUL character"),
        ({"te\ud800xt": 1}, "lone surrogate"),
    ],
)
def test_a_custom_payload_beyond_the_bounds_is_kept_out_and_named(value: Any, why: str) -> None:
    fold = ConversationFold("run-1")
    fold.apply(TextMessageStartEvent(message_id="m1"))
    fold.take_changes()

    fold.apply(CustomEvent(name="big", value=value))

    (entry,) = parts_of(fold.message("m1"))
    assert entry.keys() == {"n", "type", "name", "omitted"} and why in entry["omitted"]
    (warning,) = fold.take_changes().warnings
    assert "'big': payload not stored" in warning


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("n" * (MAX_DATA_NAME_CHARS + 1), 1),
        ("a\x00b", 1),
        ("status", {"id": "i" * (MAX_DATA_NAME_CHARS + 1)}),
        ("status", {"id": "\ud800"}),
    ],
)
def test_a_custom_event_with_a_name_or_id_no_store_keeps_is_not_stored(
    name: str, value: Any
) -> None:
    fold = ConversationFold("run-1")
    fold.apply(TextMessageStartEvent(message_id="m1"))
    fold.take_changes()

    fold.apply(CustomEvent(name=name, value=value))

    assert parts_of(fold.message("m1")) == []
    (warning,) = fold.take_changes().warnings
    assert "not stored, its name or id" in warning


def test_a_custom_payload_within_the_bounds_is_kept_whole() -> None:
    fold = ConversationFold("run-1")
    fold.apply(TextMessageStartEvent(message_id="m1"))
    value = {"deep": nested(MAX_DATA_PAYLOAD_DEPTH - 1), "big": "x" * 1000, "raw": b"\x00\x01"}

    fold.apply(CustomEvent(name="ok", value=value))

    (entry,) = parts_of(fold.message("m1"))
    assert entry["payload"] == value and entry["payload"] is not value  # a copy


# --- robustness ----------------------------------------------------------------------------

OUT_OF_ORDER: list[list[BaseEvent]] = [
    [TextMessageContentEvent(message_id="m1", delta="early")],
    [TextMessageEndEvent(message_id="nope")],
    [ToolCallArgsEvent(tool_call_id="c1", delta="{}")],
    [ToolCallEndEvent(tool_call_id="c1")],
    [ToolCallResultEvent(message_id="r", tool_call_id="ghost", content="x")],
    [ToolCallChunkEvent(delta="{}")],
    [ReasoningMessageContentEvent(message_id="r1", delta="hm")],
    [ReasoningEndEvent(message_id="never-started")],
    [StepFinishedEvent(step_name="never-started")],
    [ThinkingTextMessageContentEvent(delta="hm"), ThinkingEndEvent()],
    [ActivityDeltaEvent(message_id="a", activity_type="t", patch=[])],
    [*text_message("m1", "x"), TextMessageStartEvent(message_id="m1")],
]


@pytest.mark.parametrize("events", OUT_OF_ORDER)
def test_out_of_order_events_never_raise_and_are_reported(events: list[BaseEvent]) -> None:
    fold = fold_of(*events)
    fold.finish(COMPLETE)
    assert fold.take_changes().warnings
    assert all(not r.in_progress for r in fold.records.values())


def test_dirty_records_come_back_in_production_order() -> None:
    fold = fold_of(*full_turn())
    dirty = fold.take_dirty()
    assert [r.order for r in dirty] == sorted(r.order for r in dirty)
    assert len(dirty) == len(fold.records) and fold.take_dirty() == []
    fold.mark_dirty(dirty[:1])
    assert fold.take_dirty() == dirty[:1]


events_per_message = st.lists(st.text(max_size=5), max_size=8)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(events_per_message, min_size=1, max_size=4),
    st.randoms(use_true_random=False),
)
def test_interleaved_messages_each_get_exactly_their_deltas(
    deltas: list[list[str]], rnd: Any
) -> None:
    streams = [
        [
            TextMessageStartEvent(message_id=f"m{i}"),
            *(TextMessageContentEvent(message_id=f"m{i}", delta=d) for d in parts),
            TextMessageEndEvent(message_id=f"m{i}"),
        ]
        for i, parts in enumerate(deltas)
    ]
    merged: list[BaseEvent] = []
    while any(streams):
        stream = rnd.choice([s for s in streams if s])
        merged.append(stream.pop(0))
    fold = fold_of(*merged)
    for i, parts in enumerate(deltas):
        message = fold.message(f"m{i}")
        assert message is not None
        assert (message.content, message.status) == ("".join(parts), COMPLETE)


ANY_EVENT = st.sampled_from(
    [
        TextMessageStartEvent(message_id="m"),
        TextMessageContentEvent(message_id="m", delta="x"),
        TextMessageEndEvent(message_id="m"),
        TextMessageChunkEvent(message_id="m", delta="y"),
        TextMessageChunkEvent(delta="z"),
        ToolCallStartEvent(tool_call_id="c", tool_call_name="f", parent_message_id="m"),
        ToolCallArgsEvent(tool_call_id="c", delta="{"),
        ToolCallEndEvent(tool_call_id="c"),
        ToolCallChunkEvent(delta="}"),
        ToolCallResultEvent(message_id="res", tool_call_id="c", content="ok"),
        ReasoningStartEvent(message_id="m"),
        ReasoningMessageContentEvent(message_id="m", delta="r"),
        ReasoningMessageChunkEvent(delta="q"),
        ReasoningEndEvent(message_id="m"),
        ReasoningEncryptedValueEvent(subtype="message", entity_id="m", encrypted_value="E"),
        ActivityDeltaEvent(message_id="m", activity_type="t", patch=[]),
        ThinkingTextMessageContentEvent(delta="t"),
        ThinkingEndEvent(),
        StepFinishedEvent(step_name="s"),
        SubagentErrorEvent(subagent_run_id="s", message="x"),
        RunErrorEvent(message="x"),
        run_finished(),
    ]
)


@settings(max_examples=150, deadline=None)
@given(st.lists(ANY_EVENT, max_size=25))
def test_any_event_sequence_folds_without_raising(events: list[BaseEvent]) -> None:
    fold = fold_of(*events)
    fold.finish(MessageStatus.INTERRUPTED)
    for record in fold.records.values():
        assert not record.in_progress
        if record.parent_key is not None:
            assert fold.records[record.parent_key].kind is RecordKind.MESSAGE


# --- the delta fast path -----------------------------------------------------------------------


def fold_snapshot(fold: ConversationFold) -> Any:
    """Everything a fold holds that anyone reads: records field by field, dirty set, changes."""
    records = [
        {f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name != "text"}
        | {"content": r.content}
        for r in fold.records.values()
    ]
    changes = fold.take_changes()
    return (
        records,
        sorted(fold.dirty),
        fold.current_event_timestamp,
        fold.state,
        [r.key for r in changes.opened],
        [r.key for r in changes.closed],
        changes.boundary,
        changes.warnings,
    )


def fast_fold_history() -> list[Message]:
    """A stored assistant message ``s`` and a stored call ``p`` still waiting for its result."""
    stored = stored_message("s")
    return [stored.model_copy(update={"tool_calls": [stored_call(stored, "p")]})]


DELTA_ALPHABET = [
    TextMessageStartEvent(message_id="m"),
    TextMessageStartEvent(message_id="n", role="user"),
    TextMessageContentEvent(message_id="m", delta="a"),
    TextMessageContentEvent(message_id="n", delta=""),
    TextMessageContentEvent(message_id="r", delta="b"),
    TextMessageContentEvent(message_id="s", delta="c"),
    TextMessageContentEvent(message_id="act", delta="d"),
    TextMessageEndEvent(message_id="m"),
    TextMessageChunkEvent(message_id="m", delta="e"),
    TextMessageChunkEvent(message_id="n", delta=""),
    TextMessageChunkEvent(delta="f"),
    TextMessageChunkEvent(message_id="m", name="bob", delta="g"),
    ToolCallStartEvent(tool_call_id="c", tool_call_name="f", parent_message_id="m"),
    ToolCallStartEvent(tool_call_id="d", tool_call_name="f", parent_message_id="s"),
    ToolCallArgsEvent(tool_call_id="c", delta="{"),
    ToolCallArgsEvent(tool_call_id="d", delta="}"),
    ToolCallArgsEvent(tool_call_id="p", delta="["),
    ToolCallEndEvent(tool_call_id="c"),
    ToolCallResultEvent(message_id="p-result", tool_call_id="p", content="ok"),
    ToolCallChunkEvent(tool_call_id="c", delta="h"),
    ToolCallChunkEvent(tool_call_id="e", tool_call_name="f", delta="i"),
    ToolCallChunkEvent(delta="j"),
    ToolCallChunkEvent(tool_call_id="c", delta=None),
    ToolCallChunkEvent(tool_call_id="p", delta="q"),
    ReasoningStartEvent(message_id="r"),
    ReasoningMessageStartEvent(message_id="r", role="reasoning"),
    ReasoningMessageContentEvent(message_id="r", delta="k"),
    ReasoningMessageContentEvent(message_id="m", delta="l"),
    ReasoningMessageContentEvent(message_id="r", delta=""),
    ReasoningMessageEndEvent(message_id="r"),
    ReasoningMessageChunkEvent(message_id="r", delta="m"),
    ReasoningMessageChunkEvent(message_id="q", delta="n"),
    ReasoningMessageChunkEvent(delta="o"),
    ReasoningEndEvent(message_id="r"),
    ActivitySnapshotEvent(message_id="act", activity_type="t", content={"x": 1}),
    StepStartedEvent(step_name="s1"),
    CustomEvent(name="x", value=1),
    CustomEvent(name="x", value={"id": "k", "v": 1}),
    run_finished(),
]
"""Deltas in every situation the fast path must recognise or decline (open chunks of
another kind, unknown, aliased, adopted and stored ids, other families, empty deltas),
with the events that create those situations. Each has its own timestamp."""
DELTA_ALPHABET = [e.model_copy(update={"timestamp": i}) for i, e in enumerate(DELTA_ALPHABET)]


def assert_fast_path_folds_like_apply(events: Sequence[BaseEvent], history: list[Message]) -> None:
    slow = ConversationFold("run-1", thread_id="thread-1", history=history)
    fast = ConversationFold("run-1", thread_id="thread-1", history=history)
    for event in events:
        assert fast.apply(event) == slow.apply_reference(event), event
        assert fold_snapshot(fast) == fold_snapshot(slow), event


def test_the_delta_fast_path_folds_every_pair_of_events_exactly_like_the_reference() -> None:
    history = fast_fold_history()
    for first, second in itertools.product(DELTA_ALPHABET, repeat=2):
        assert_fast_path_folds_like_apply([first, second], history)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(DELTA_ALPHABET), max_size=40))
@example(  # a chunk continuing a stored call this run answered: its arguments are not owned
    [
        ToolCallResultEvent(message_id="p-result", tool_call_id="p", content="ok"),
        ToolCallChunkEvent(tool_call_id="p", delta="q"),
        ToolCallChunkEvent(delta="j"),
    ]
)
@example(  # text for an id already used by a reasoning message goes to a renamed message
    [
        ReasoningMessageStartEvent(message_id="r", role="reasoning"),
        TextMessageContentEvent(message_id="r", delta="b"),
        TextMessageContentEvent(message_id="r", delta="b"),
    ]
)
@example(  # long runs of one record's deltas, of every kind, back to back
    [
        TextMessageStartEvent(message_id="m"),
        *[TextMessageContentEvent(message_id="m", delta=c) for c in "abcde"],
        ToolCallStartEvent(tool_call_id="c", tool_call_name="f", parent_message_id="m"),
        *[ToolCallArgsEvent(tool_call_id="c", delta=c) for c in '{"a":1}'],
        ReasoningMessageStartEvent(message_id="r", role="reasoning"),
        *[ReasoningMessageContentEvent(message_id="r", delta=c) for c in ("x", "", "y")],
        *[TextMessageContentEvent(message_id="m", delta=c) for c in "fgh"],
        *[ToolCallArgsEvent(tool_call_id="p", delta=c) for c in "[]"],  # not owned
    ]
)
def test_the_delta_fast_path_folds_any_stream_exactly_like_the_reference(
    events: list[BaseEvent],
) -> None:
    assert_fast_path_folds_like_apply(events, fast_fold_history())


def counted_reference(fold: ConversationFold, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The types of the events ``fold`` folds by the reference path from now on."""
    seen: list[str] = []
    reference = fold.apply_reference

    def counting(event: BaseEvent) -> bool:
        seen.append(event.type.value)
        return reference(event)

    monkeypatch.setattr(fold, "apply_reference", counting)
    return seen


def test_the_deltas_of_a_well_formed_stream_after_their_first_take_the_fast_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fold = ConversationFold("run-1")
    seen = counted_reference(fold, monkeypatch)
    events = full_turn(deltas=4)

    for event in events:
        fold.apply(event)
        fold.take_changes()  # as the storage agent does after each event

    # Each record's first delta establishes the fast path; the three after it take it.
    contents = (TextMessageContentEvent, ToolCallArgsEvent, ReasoningMessageContentEvent)
    deltas = sum(isinstance(e, contents) for e in events)
    assert len(seen) == len(events) - (deltas - deltas // 4)


def test_the_fast_path_takes_only_the_record_the_last_delta_extended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fold = fold_of(TextMessageStartEvent(message_id="m"), TextMessageStartEvent(message_id="n"))
    fold.take_changes()
    seen = counted_reference(fold, monkeypatch)

    for event in [
        TextMessageContentEvent(message_id="m", delta="a"),
        TextMessageContentEvent(message_id="m", delta="b"),  # fast
        TextMessageContentEvent(message_id="n", delta="c"),  # another record: reference
        TextMessageEndEvent(message_id="n"),  # not a delta: reference
        TextMessageContentEvent(message_id="m", delta="d"),  # after another event: reference
        TextMessageContentEvent(message_id="m", delta="e"),  # fast
    ]:
        fold.apply(event)
        fold.take_changes()

    assert len(seen) == 4
    assert fold.records["m:m"].content == "abde"
    assert fold.records["m:n"].content == "c"
