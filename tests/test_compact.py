"""Event compaction: shorter streams that validate and fold to the same history."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import jsonpatch
import pytest
from ag_ui import core as ag
from ag_ui.core import BaseEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agui_validation import assert_valid_stream, validation_report
from threadstore.agui._compact import compact_events
from threadstore.fold import ConversationFold

CONTENT_TYPES = (ag.TextMessageContentEvent, ag.ToolCallArgsEvent, ag.ReasoningMessageContentEvent)


# --- builders -----------------------------------------------------------------------------


def start(mid: str, role: Any = "assistant") -> ag.TextMessageStartEvent:
    return ag.TextMessageStartEvent(message_id=mid, role=role)


def text(mid: str, delta: str, **kw: Any) -> ag.TextMessageContentEvent:
    return ag.TextMessageContentEvent(message_id=mid, delta=delta, **kw)


def end(mid: str) -> ag.TextMessageEndEvent:
    return ag.TextMessageEndEvent(message_id=mid)


def call(cid: str, name: str = "search", parent: str | None = None) -> ag.ToolCallStartEvent:
    return ag.ToolCallStartEvent(tool_call_id=cid, tool_call_name=name, parent_message_id=parent)


def args(cid: str, delta: str) -> ag.ToolCallArgsEvent:
    return ag.ToolCallArgsEvent(tool_call_id=cid, delta=delta)


def call_end(cid: str) -> ag.ToolCallEndEvent:
    return ag.ToolCallEndEvent(tool_call_id=cid)


def custom(name: str) -> ag.CustomEvent:
    return ag.CustomEvent(name=name, value=None)


def run(*events: BaseEvent, run_id: str = "r1") -> list[BaseEvent]:
    return [
        ag.RunStartedEvent(thread_id="t1", run_id=run_id, timestamp=1),
        *events,
        ag.RunFinishedEvent(thread_id="t1", run_id=run_id),
    ]


def shape(events: Sequence[BaseEvent]) -> list[tuple[str, ...]]:
    """Each event as (type, id, delta-or-name) for readable comparisons."""
    out: list[tuple[str, ...]] = []
    for e in events:
        ident = getattr(e, "message_id", None) or getattr(e, "tool_call_id", None) or ""
        extra = getattr(e, "delta", None)
        if extra is None:
            extra = getattr(e, "tool_call_name", None) or getattr(e, "name", None) or ""
        out.append((e.type.value, ident, extra if isinstance(extra, str) else ""))
    return out


# --- a reference fold: what a persisted history would contain --------------------------------


def fold(events: Sequence[BaseEvent]) -> dict[str, Any]:
    """Fold events into plain data: records in creation order, state, steps and customs."""
    records: dict[tuple[str, str], dict[str, Any]] = {}
    order: list[tuple[str, str]] = []
    steps: list[str] = []
    state: Any = None
    customs: list[str] = []
    last_text: str | None = None
    outcome = None

    def create(key: tuple[str, str], **fields: Any) -> None:
        if key not in records:
            order.append(key)
        step = steps[-1] if steps else None
        records[key] = {"content": "", "status": "active", "step": step, **fields}

    def close(key: tuple[str, str]) -> None:
        if key in records:
            records[key]["status"] = "complete"
            records[key]["end_step"] = steps[-1] if steps else None

    for e in events:
        if isinstance(e, ag.TextMessageStartEvent):
            create(("msg", e.message_id), role=e.role)
            last_text = e.message_id
        elif isinstance(e, ag.TextMessageContentEvent):
            records[("msg", e.message_id)]["content"] += e.delta
        elif isinstance(e, ag.TextMessageEndEvent):
            close(("msg", e.message_id))
        elif isinstance(e, ag.ToolCallStartEvent):
            create(
                ("tool", e.tool_call_id),
                name=e.tool_call_name,
                parent=e.parent_message_id or last_text,
            )
        elif isinstance(e, ag.ToolCallArgsEvent):
            records[("tool", e.tool_call_id)]["content"] += e.delta
        elif isinstance(e, ag.ToolCallEndEvent):
            close(("tool", e.tool_call_id))
        elif isinstance(e, ag.ToolCallResultEvent):
            records[("tool", e.tool_call_id)]["result"] = (e.message_id, e.content)
        elif isinstance(e, ag.ReasoningStartEvent):
            create(("block", e.message_id))
        elif isinstance(e, ag.ReasoningEndEvent):
            close(("block", e.message_id))
        elif isinstance(e, ag.ReasoningMessageStartEvent):
            create(("reasoning", e.message_id))
        elif isinstance(e, ag.ReasoningMessageContentEvent):
            records[("reasoning", e.message_id)]["content"] += e.delta
        elif isinstance(e, ag.ReasoningMessageEndEvent):
            close(("reasoning", e.message_id))
        elif isinstance(e, ag.MessagesSnapshotEvent):
            for m in e.messages:
                if ("msg", m.id) not in records:
                    create(("msg", m.id), role=m.role)
                records[("msg", m.id)]["content"] = m.content
        elif isinstance(e, ag.StateSnapshotEvent):
            state = copy.deepcopy(e.snapshot)
        elif isinstance(e, ag.StateDeltaEvent):
            patch = [op.model_dump(by_alias=True) for op in e.delta]
            state = jsonpatch.apply_patch(state, patch)
        elif isinstance(e, ag.StepStartedEvent):
            steps.append(e.step_name)
        elif isinstance(e, ag.StepFinishedEvent):
            steps.remove(e.step_name)
        elif isinstance(e, ag.CustomEvent):
            customs.append(e.name)
        elif isinstance(e, ag.RunFinishedEvent | ag.RunErrorEvent):
            outcome = e.type.value
            for record in records.values():
                if record["status"] == "active":
                    record["status"] = "finalized"
    return {
        "records": [(key, records[key]) for key in order],
        "state": state,
        "customs": customs,
        "outcome": outcome,
    }


def threadstore_fold(events: Sequence[BaseEvent]) -> dict[str, Any]:
    """Fold events with threadstore's own fold; return its records and state as plain data."""
    folded = ConversationFold("r1", thread_id="t1")
    for event in events:
        folded.apply(event)
    # Version counters count changes, which compaction reduces on purpose.
    skip = {"text", "version", "content_version"}
    records = [
        {
            **{f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name not in skip},
            "content": r.content,
        }
        for r in folded.records.values()
    ]
    return {"records": records, "state": folded.state, "run": folded.run}


def non_content(events: Sequence[BaseEvent]) -> list[BaseEvent]:
    return [e for e in events if not isinstance(e, CONTENT_TYPES)]


# --- the behaviour of AG-UI's TypeScript compactEvents ----------------------------------------


def test_text_deltas_of_one_message_merge_into_one_content_event() -> None:
    events = [start("m1"), text("m1", "Hello"), text("m1", " "), text("m1", "world"), end("m1")]

    assert shape(compact_events(events)) == [
        ("TEXT_MESSAGE_START", "m1", ""),
        ("TEXT_MESSAGE_CONTENT", "m1", "Hello world"),
        ("TEXT_MESSAGE_END", "m1", ""),
    ]


def test_tool_call_args_merge_into_one_args_event() -> None:
    events = [
        call("c1", parent="m1"),
        args("c1", '{"query": "'),
        args("c1", "weather"),
        args("c1", ' today"'),
        args("c1", "}"),
        call_end("c1"),
    ]

    assert shape(compact_events(events)) == [
        ("TOOL_CALL_START", "c1", "search"),
        ("TOOL_CALL_ARGS", "c1", '{"query": "weather today"}'),
        ("TOOL_CALL_END", "c1", ""),
    ]


def test_reasoning_deltas_merge_like_text() -> None:
    events = [
        ag.ReasoningStartEvent(message_id="b1"),
        ag.ReasoningMessageStartEvent(message_id="r1"),
        ag.ReasoningMessageContentEvent(message_id="r1", delta="Let me "),
        ag.ReasoningMessageContentEvent(message_id="r1", delta="think."),
        ag.ReasoningMessageEndEvent(message_id="r1"),
        ag.ReasoningEndEvent(message_id="b1"),
    ]

    assert shape(compact_events(events))[1:4] == [
        ("REASONING_MESSAGE_START", "r1", ""),
        ("REASONING_MESSAGE_CONTENT", "r1", "Let me think."),
        ("REASONING_MESSAGE_END", "r1", ""),
    ]


def test_consecutive_messages_and_tool_calls_compact_independently() -> None:
    events = [
        start("m1", "user"),
        text("m1", "Hi"),
        end("m1"),
        start("m2"),
        text("m2", "Let me "),
        text("m2", "search"),
        end("m2"),
        call("c1", parent="m2"),
        args("c1", '{"q": "'),
        args("c1", 'test"}'),
        call_end("c1"),
        call("c2", name="calc", parent="m2"),
        args("c2", '{"a": 5}'),
        call_end("c2"),
    ]

    assert [s[2] for s in shape(compact_events(events)) if s[0].endswith(("CONTENT", "ARGS"))] == [
        "Hi",
        "Let me search",
        '{"q": "test"}',
        '{"a": 5}',
    ]
    assert len(compact_events(events)) == 12


def test_an_unfinished_message_keeps_its_start_and_merged_content() -> None:
    events = [start("m1", "user"), text("m1", "Incom"), text("m1", "plete")]

    assert shape(compact_events(events)) == [
        ("TEXT_MESSAGE_START", "m1", ""),
        ("TEXT_MESSAGE_CONTENT", "m1", "Incomplete"),
    ]


def test_streams_without_deltas_pass_through_unchanged() -> None:
    events = [custom("acme.one"), call("tool1"), call_end("tool1")]

    compacted = compact_events(events)

    assert compacted == events
    assert all(a is b for a, b in zip(compacted, events, strict=True))


def test_empty_deltas_vanish_into_the_merged_delta() -> None:
    events = [start("m1"), text("m1", ""), text("m1", "Hello"), text("m1", ""), end("m1")]

    assert shape(compact_events(events))[1] == ("TEXT_MESSAGE_CONTENT", "m1", "Hello")


def test_a_lone_empty_delta_is_kept_as_it_came() -> None:
    events = [start("m1"), text("m1", ""), end("m1")]

    assert compact_events(events)[1] is events[1]


# --- where this deliberately differs: nothing but deltas ever moves ---------------------------


def test_events_between_deltas_stay_in_place_while_the_deltas_merge() -> None:
    events = [
        start("m1"),
        text("m1", "Processing"),
        ag.RawEvent(event={"acme": "thinking"}),
        text("m1", "..."),
        ag.RawEvent(event={"acme": "done"}),
        end("m1"),
    ]

    assert shape(compact_events(events)) == [
        ("TEXT_MESSAGE_START", "m1", ""),
        ("TEXT_MESSAGE_CONTENT", "m1", "Processing..."),
        ("RAW", "", ""),
        ("RAW", "", ""),
        ("TEXT_MESSAGE_END", "m1", ""),
    ]


def test_a_custom_event_between_text_deltas_keeps_them_apart() -> None:
    # A CUSTOM event is a part of the turn (data or citation): text after it is a new part.
    events = [start("m1"), text("m1", "Processing"), custom("acme.thinking"), text("m1", "...")]

    assert shape(compact_events(events)) == [
        ("TEXT_MESSAGE_START", "m1", ""),
        ("TEXT_MESSAGE_CONTENT", "m1", "Processing"),
        ("CUSTOM", "", "acme.thinking"),
        ("TEXT_MESSAGE_CONTENT", "m1", "..."),
    ]


def test_interleaved_messages_keep_their_interleave_and_merge_only_adjacent_deltas() -> None:
    # Each text delta after another message's is a new part of what the turn shows (the
    # parts order keeps it), so only deltas with no other element between them merge.
    events = run(
        start("m1"),
        start("m2"),
        text("m1", "a"),
        text("m2", "x"),
        text("m1", "b"),
        text("m2", "y"),
        end("m1"),
        text("m2", "z"),
        end("m2"),
    )

    compacted = compact_events(events)

    assert shape(compacted)[1:-1] == [
        ("TEXT_MESSAGE_START", "m1", ""),
        ("TEXT_MESSAGE_START", "m2", ""),
        ("TEXT_MESSAGE_CONTENT", "m1", "a"),
        ("TEXT_MESSAGE_CONTENT", "m2", "x"),
        ("TEXT_MESSAGE_CONTENT", "m1", "b"),
        ("TEXT_MESSAGE_CONTENT", "m2", "yz"),
        ("TEXT_MESSAGE_END", "m1", ""),
        ("TEXT_MESSAGE_END", "m2", ""),
    ]
    assert_valid_stream(compacted, max_warnings=0)


def test_a_tool_call_inside_an_open_message_keeps_its_place() -> None:
    events = run(
        start("m1"),
        text("m1", "Let me "),
        call("c1", parent="m1"),
        args("c1", "{}"),
        call_end("c1"),
        text("m1", "check."),
        end("m1"),
    )

    compacted = compact_events(events)

    assert non_content(compacted) == non_content(events)
    assert fold(compacted) == fold(events)
    assert threadstore_fold(compacted) == threadstore_fold(events)
    assert_valid_stream(compacted, max_warnings=0)


@pytest.mark.parametrize(
    "barrier",
    [
        ag.StepStartedEvent(step_name="s2"),
        ag.MessagesSnapshotEvent(messages=[ag.AssistantMessage(id="m1", content="snap")]),
        ag.TextMessageChunkEvent(message_id="m9", delta="chunk"),
        ag.ToolCallChunkEvent(tool_call_id="c9", tool_call_name="x", delta="{}"),
        ag.ReasoningMessageChunkEvent(message_id="r9", delta="hm"),
        ag.ReasoningEncryptedValueEvent(subtype="message", entity_id="m1", encrypted_value="e"),
        ag.ActivitySnapshotEvent(message_id="m1", activity_type="PLAN", content={}),
        ag.ToolCallStartEvent(tool_call_id="c1", tool_call_name="x", parent_message_id="m1"),
        ag.RunErrorEvent(message="boom"),
        ag.SubagentFinishedEvent(subagent_run_id="sub1"),
    ],
    ids=lambda e: e.type.value,
)
def test_deltas_never_merge_across_an_event_that_could_see_or_change_them(
    barrier: BaseEvent,
) -> None:
    events = [start("m1"), text("m1", "a"), barrier, text("m1", "b"), end("m1")]

    assert compact_events(events) == events


def test_a_legacy_or_unknown_event_type_is_a_barrier_too() -> None:
    from threadstore.agui.legacy import ThinkingStartEvent

    events = [start("m1"), text("m1", "a"), ThinkingStartEvent(), text("m1", "b"), end("m1")]

    assert compact_events(events) == events


def test_a_message_snapshot_between_deltas_keeps_the_folded_content() -> None:
    events = run(
        start("m1"),
        text("m1", "Hel"),
        ag.MessagesSnapshotEvent(messages=[ag.AssistantMessage(id="m1", content="Hel")]),
        text("m1", "lo"),
        text("m1", "!"),
        end("m1"),
    )

    compacted = compact_events(events)

    assert fold(compacted) == fold(events)
    assert fold(compacted)["records"][0][1]["content"] == "Hello!"
    assert len(compacted) == len(events) - 1


def test_deltas_with_different_metadata_or_subagent_stay_apart() -> None:
    events = [
        start("m1"),
        text("m1", "a"),
        text("m1", "b", metadata={"k": 1}),
        text("m1", "c", metadata={"k": 1}),
        text("m1", "d", subagent_run_id="sub1"),
        end("m1"),
    ]

    assert [s[2] for s in shape(compact_events(events))][1:-1] == ["a", "bc", "d"]


def test_merged_event_keeps_the_first_timestamp_and_drops_raw_events() -> None:
    events = [
        start("m1"),
        text("m1", "a", timestamp=10, raw_event={"provider": 1}),
        text("m1", "b", timestamp=11, raw_event={"provider": 2}),
        end("m1"),
    ]

    merged = compact_events(events)[1]

    assert merged.model_dump(mode="json", by_alias=True) == {
        "type": "TEXT_MESSAGE_CONTENT",
        "messageId": "m1",
        "delta": "ab",
        "timestamp": 10,
    }


def test_compaction_leaves_its_input_untouched() -> None:
    events = [start("m1"), text("m1", "a"), text("m1", "b"), end("m1")]
    before = [e.model_copy(deep=True) for e in events]

    compact_events(events)

    assert events == before


# --- the validator harness ------------------------------------------------------------------


def test_the_validator_harness_rejects_content_before_start() -> None:
    broken = run(text("m1", "too early"), start("m1"), end("m1"))

    with pytest.raises(AssertionError, match="AGUI101"):
        assert_valid_stream(broken)
    assert [d.rule for d in validation_report(broken).diagnostics if d.severity == "error"] == [
        "AGUI101"
    ]


def test_the_validator_harness_can_forbid_warnings() -> None:
    empty_delta = run(start("m1"), text("m1", ""), end("m1"))

    assert_valid_stream(empty_delta)
    with pytest.raises(AssertionError, match="AGUI105"):
        assert_valid_stream(empty_delta, max_warnings=0)


def test_the_validator_harness_accepts_wire_dicts_and_jsonl() -> None:
    events = run(start("m1"), text("m1", "hi"), end("m1"))
    wire = [e.model_dump(mode="json", by_alias=True) for e in events]

    assert_valid_stream(wire, max_warnings=0)
    assert_valid_stream("\n".join(json.dumps(w) for w in wire), max_warnings=0)


# --- a full scripted stream ----------------------------------------------------------------


def scripted_stream() -> list[BaseEvent]:
    return run(
        ag.StepStartedEvent(step_name="plan"),
        ag.StateSnapshotEvent(snapshot={"todo": [], "done": 0}),
        ag.ReasoningStartEvent(message_id="b1"),
        ag.ReasoningMessageStartEvent(message_id="r1"),
        *(
            ag.ReasoningMessageContentEvent(message_id="r1", delta=d)
            for d in ("The ", "user ", "asks.")
        ),
        ag.ReasoningMessageEndEvent(message_id="r1"),
        ag.ReasoningEndEvent(message_id="b1"),
        ag.StepFinishedEvent(step_name="plan"),
        ag.StepStartedEvent(step_name="act"),
        start("m1"),
        *(text("m1", d) for d in ("Let ", "me ", "look ", "that ", "up.")),
        ag.StateDeltaEvent(delta=[{"op": "add", "path": "/todo/-", "value": "search"}]),
        text("m1", ""),
        end("m1"),
        call("c1", parent="m1"),
        *(args("c1", d) for d in ('{"q"', ': "wea', 'ther"}')),
        call_end("c1"),
        ag.ToolCallResultEvent(message_id="t1", tool_call_id="c1", content="sunny"),
        ag.StateDeltaEvent(delta=[{"op": "replace", "path": "/done", "value": 1}]),
        start("m2"),
        *(text("m2", d) for d in ("It ", "is ", "sunny.")),
        end("m2"),
        ag.StepFinishedEvent(step_name="act"),
    )


def test_the_scripted_stream_and_its_compaction_both_validate() -> None:
    events = scripted_stream()
    compacted = compact_events(events)

    assert_valid_stream(events, features=["shared-state"])
    assert_valid_stream(compacted, features=["shared-state"], max_warnings=0)
    # 15 deltas in 4 segments (r1, m1, c1, m2; the STATE_DELTA inside m1 commutes).
    assert len(compacted) == len(events) - (15 - 4)
    assert fold(compacted) == fold(events)
    assert threadstore_fold(compacted) == threadstore_fold(events)


def test_the_scripted_stream_folds_to_the_expected_history() -> None:
    history = fold(compact_events(scripted_stream()))

    assert [(key, record["content"]) for key, record in history["records"]] == [
        (("block", "b1"), ""),
        (("reasoning", "r1"), "The user asks."),
        (("msg", "m1"), "Let me look that up."),
        (("tool", "c1"), '{"q": "weather"}'),
        (("msg", "m2"), "It is sunny."),
    ]
    assert history["state"] == {"todo": ["search"], "done": 1}


def test_compacting_twice_changes_nothing_more() -> None:
    once = compact_events(scripted_stream())

    assert compact_events(once) == once


# --- property: any valid interleaving compacts to an equivalent valid stream -------------------


@st.composite
def valid_streams(draw: st.DrawFn) -> list[BaseEvent]:
    """A valid run whose text, tool, reasoning, step, state and custom streams interleave."""
    deltas = st.lists(st.text(max_size=4), max_size=5)
    queues: list[list[BaseEvent]] = []
    text_ids = [f"m{i}" for i in range(draw(st.integers(0, 3)))]
    for mid in text_ids:
        queues.append([start(mid), *(text(mid, d) for d in draw(deltas)), end(mid)])
    for i in range(draw(st.integers(0, 2))):
        cid = f"c{i}"
        payload = json.dumps({"q": draw(st.text(max_size=6))})
        cuts = sorted(draw(st.sets(st.integers(1, max(1, len(payload) - 1)), max_size=4)))
        pieces = [payload[a:b] for a, b in zip([0, *cuts], [*cuts, len(payload)], strict=True)]
        parent = draw(st.sampled_from([None, *text_ids]))
        queue: list[BaseEvent] = [call(cid, parent=parent), *(args(cid, p) for p in pieces)]
        queue.append(call_end(cid))
        if draw(st.booleans()):
            queue.append(ag.ToolCallResultEvent(message_id=f"t{i}", tool_call_id=cid, content="ok"))
        queues.append(queue)
    for i in range(draw(st.integers(0, 2))):
        block, rid = f"b{i}", f"r{i}"
        queues.append(
            [
                ag.ReasoningStartEvent(message_id=block),
                ag.ReasoningMessageStartEvent(message_id=rid),
                *(ag.ReasoningMessageContentEvent(message_id=rid, delta=d) for d in draw(deltas)),
                ag.ReasoningMessageEndEvent(message_id=rid),
                ag.ReasoningEndEvent(message_id=block),
            ]
        )
    for i in range(draw(st.integers(0, 2))):
        queues.append(
            [ag.StepStartedEvent(step_name=f"s{i}"), ag.StepFinishedEvent(step_name=f"s{i}")]
        )
    if draw(st.booleans()):
        values = draw(st.lists(st.integers(), max_size=3))
        queues.append(
            [
                ag.StateSnapshotEvent(snapshot={"items": []}),
                *(
                    ag.StateDeltaEvent(delta=[{"op": "add", "path": "/items/-", "value": v}])
                    for v in values
                ),
            ]
        )
    queues.extend([custom(f"acme.c{i}")] for i in range(draw(st.integers(0, 2))))
    # A seeded uniform shuffle interleaves far more than drawing each index would.
    rng = draw(st.randoms(use_true_random=False))
    events: list[BaseEvent] = []
    while queues:
        queue = rng.choice(queues)
        events.append(queue.pop(0))
        queues = [q for q in queues if q]
    if draw(st.booleans()) and text_ids:
        snapshot = [ag.AssistantMessage(id=mid, content="snap") for mid in text_ids]
        events.insert(rng.randint(0, len(events)), ag.MessagesSnapshotEvent(messages=snapshot))
    return run(*events)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_streams())
def test_compaction_preserves_validity_history_and_event_order(events: list[BaseEvent]) -> None:
    original = validation_report(events)
    assert original.summary.errors == 0, original.diagnostics  # the generator's own promise

    compacted = compact_events(events)

    report = validation_report(compacted)
    assert report.summary.errors == 0, report.diagnostics
    assert report.summary.warnings <= original.summary.warnings
    assert fold(compacted) == fold(events)
    assert threadstore_fold(compacted) == threadstore_fold(events)
    assert len(compacted) <= len(events)
    kept = non_content(compacted)
    assert len(kept) == len(non_content(events))
    assert all(a is b for a, b in zip(kept, non_content(events), strict=True))
    assert compact_events(compacted) == compacted
