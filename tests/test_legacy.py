"""Parsing AG-UI events from JSON, and the deprecated THINKING_* events."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)

from agui_validation import assert_valid_stream, validation_report
from threadstore.codec.thinking import (
    THINKING_TITLE_METADATA_KEY,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ThinkingTextMessageContentEvent,
    ThinkingTextMessageEndEvent,
    ThinkingTextMessageStartEvent,
    ThinkingTranslator,
    parse_event,
    to_reasoning_event,
    to_reasoning_events,
)
from threadstore.errors import InvalidInputError

THINKING_STREAM: list[dict[str, Any]] = [
    {"type": "RUN_STARTED", "threadId": "t1", "runId": "r1", "timestamp": 1},
    {"type": "THINKING_START", "title": "Planning"},
    {"type": "THINKING_TEXT_MESSAGE_START"},
    {"type": "THINKING_TEXT_MESSAGE_CONTENT", "delta": "First, "},
    {"type": "THINKING_TEXT_MESSAGE_CONTENT", "delta": "check the docs."},
    {"type": "THINKING_TEXT_MESSAGE_END"},
    {"type": "THINKING_TEXT_MESSAGE_START"},
    {"type": "THINKING_TEXT_MESSAGE_CONTENT", "delta": "Then answer."},
    {"type": "THINKING_TEXT_MESSAGE_END"},
    {"type": "THINKING_END"},
    {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Done."},
    {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
    {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"},
]


# --- parse_event ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "cls"),
    [
        ({"type": "THINKING_START", "title": "Plan"}, ThinkingStartEvent),
        ({"type": "THINKING_START"}, ThinkingStartEvent),
        ({"type": "THINKING_END"}, ThinkingEndEvent),
        ({"type": "THINKING_TEXT_MESSAGE_START"}, ThinkingTextMessageStartEvent),
        ({"type": "THINKING_TEXT_MESSAGE_CONTENT", "delta": "hm"}, ThinkingTextMessageContentEvent),
        ({"type": "THINKING_TEXT_MESSAGE_END"}, ThinkingTextMessageEndEvent),
    ],
)
def test_thinking_events_parse_into_their_legacy_classes(
    payload: dict[str, Any], cls: type[BaseEvent]
) -> None:
    event = parse_event(payload)

    assert type(event) is cls
    assert isinstance(event, BaseEvent)
    assert event.model_dump(mode="json", by_alias=True) == payload


def test_thinking_start_keeps_title_and_content_keeps_delta() -> None:
    start = parse_event('{"type": "THINKING_START", "title": "Plan", "timestamp": 7}')
    content = parse_event(b'{"type": "THINKING_TEXT_MESSAGE_CONTENT", "delta": "x"}')

    assert isinstance(start, ThinkingStartEvent)
    assert (start.title, start.timestamp) == ("Plan", 7)
    assert isinstance(content, ThinkingTextMessageContentEvent)
    assert content.delta == "x"


def test_thinking_content_accepts_an_empty_delta() -> None:
    event = parse_event({"type": "THINKING_TEXT_MESSAGE_CONTENT", "delta": ""})

    assert isinstance(event, ThinkingTextMessageContentEvent)
    assert event.delta == ""


def test_thinking_events_serialize_to_the_wire_shape_the_validator_knows() -> None:
    events = [parse_event(payload) for payload in THINKING_STREAM]

    report = validation_report(events)

    assert report.summary.errors == 0
    assert not [d for d in report.diagnostics if d.rule == "AGUI504"]


@pytest.mark.parametrize(
    ("payload", "cls", "field", "value"),
    [
        (
            {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "search"},
            ToolCallStartEvent,
            "tool_call_id",
            "c1",
        ),
        (
            {"type": "TOOL_CALL_START", "tool_call_id": "c1", "tool_call_name": "search"},
            ToolCallStartEvent,
            "tool_call_name",
            "search",
        ),
        (
            {"type": "TEXT_MESSAGE_CONTENT", "message_id": "m1", "delta": "hi"},
            TextMessageContentEvent,
            "message_id",
            "m1",
        ),
        (
            {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/a", "value": 1}]},
            StateDeltaEvent,
            "type",
            "STATE_DELTA",
        ),
        (
            {"type": "CUSTOM", "name": "acme.ping", "value": None},
            CustomEvent,
            "name",
            "acme.ping",
        ),
    ],
)
def test_current_events_parse_from_camel_or_snake_case(
    payload: dict[str, Any], cls: type[BaseEvent], field: str, value: str
) -> None:
    event = parse_event(json.dumps(payload))

    assert type(event) is cls
    assert getattr(event, field) == value


def test_nested_run_input_parses_with_either_spelling() -> None:
    event = parse_event(
        {
            "type": "RUN_STARTED",
            "thread_id": "t1",
            "runId": "r1",
            "input": {
                "threadId": "t1",
                "run_id": "r1",
                "messages": [{"id": "u1", "role": "user", "content": "hi"}],
            },
        }
    )

    assert isinstance(event, RunStartedEvent)
    assert event.input is not None
    assert event.input.messages == [UserMessage(id="u1", content="hi")]


@pytest.mark.parametrize(
    "event",
    [
        RunStartedEvent(thread_id="t", run_id="r", timestamp=3),
        TextMessageStartEvent(message_id="m", role="assistant"),
        TextMessageEndEvent(message_id="m"),
        ToolCallResultEvent(message_id="tm", tool_call_id="c", content="42"),
        ReasoningMessageContentEvent(message_id="m", delta="because"),
        RunFinishedEvent(thread_id="t", run_id="r", result={"ok": True}),
        ThinkingStartEvent(title="Plan"),
    ],
)
def test_serialized_events_parse_back_to_equal_events(event: BaseEvent) -> None:
    assert parse_event(event.model_dump_json(by_alias=True)) == event


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ("{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        ("[1, 2]", "must be a JSON object, got list"),
        ({"delta": "x"}, "no string 'type'"),
        ({"type": 5}, "no string 'type'"),
        ({"type": "THINKING_BEGIN"}, "unknown AG-UI event type 'THINKING_BEGIN'"),
        ({"type": "text_message_content"}, "unknown AG-UI event type"),
        ({"type": "TEXT_MESSAGE_CONTENT", "delta": "x"}, "messageId: Field required"),
        ({"type": "THINKING_TEXT_MESSAGE_CONTENT"}, "delta: Field required"),
        ({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "robot"}, "TEXT_MESSAGE_START"),
    ],
)
def test_bad_payloads_raise_invalid_input_with_a_clear_message(
    data: dict[str, Any] | str | bytes, fragment: str
) -> None:
    with pytest.raises(InvalidInputError, match=fragment) as caught:
        parse_event(data)

    assert isinstance(caught.value, ValueError)


# --- THINKING_* -> REASONING_* ------------------------------------------------------


@pytest.mark.parametrize(
    ("legacy", "modern"),
    [
        (ThinkingStartEvent(), ReasoningStartEvent),
        (ThinkingEndEvent(), ReasoningEndEvent),
        (ThinkingTextMessageStartEvent(), ReasoningMessageStartEvent),
        (ThinkingTextMessageContentEvent(delta="d"), ReasoningMessageContentEvent),
        (ThinkingTextMessageEndEvent(), ReasoningMessageEndEvent),
    ],
)
def test_each_thinking_event_maps_to_its_reasoning_twin(
    legacy: Any, modern: type[BaseEvent]
) -> None:
    legacy = legacy.model_copy(update={"timestamp": 11, "raw_event": {"src": 1}})

    translated = to_reasoning_event(legacy, "rid")

    assert type(translated) is modern
    assert translated.model_dump(exclude={"type", "message_id", "delta", "role"}) == {
        "timestamp": 11,
        "raw_event": {"src": 1},
    }
    assert getattr(translated, "message_id", None) == "rid"


def test_thinking_content_delta_carries_over() -> None:
    translated = to_reasoning_event(ThinkingTextMessageContentEvent(delta="abc"), "rid")

    assert isinstance(translated, ReasoningMessageContentEvent)
    assert translated.delta == "abc"


def test_thinking_title_travels_in_metadata_next_to_existing_keys() -> None:
    translated = to_reasoning_event(ThinkingStartEvent(title="Plan", metadata={"k": 1}), "rid")

    assert translated.metadata == {"k": 1, THINKING_TITLE_METADATA_KEY: "Plan"}


def _translated_stream() -> list[BaseEvent]:
    return to_reasoning_events([parse_event(payload) for payload in THINKING_STREAM])


def test_translated_thinking_stream_is_a_valid_reasoning_stream() -> None:
    translated = _translated_stream()

    assert not any(type(e).__name__.startswith("Thinking") for e in translated)
    assert_valid_stream(translated, max_warnings=0)


def test_synthesized_ids_correlate_each_block_and_message() -> None:
    translated = _translated_stream()
    ids = [(e.type.value, getattr(e, "message_id", None)) for e in translated[1:10]]

    block = ids[0][1]
    first, second = ids[1][1], ids[5][1]
    assert ids == [
        ("REASONING_START", block),
        ("REASONING_MESSAGE_START", first),
        ("REASONING_MESSAGE_CONTENT", first),
        ("REASONING_MESSAGE_CONTENT", first),
        ("REASONING_MESSAGE_END", first),
        ("REASONING_MESSAGE_START", second),
        ("REASONING_MESSAGE_CONTENT", second),
        ("REASONING_MESSAGE_END", second),
        ("REASONING_END", block),
    ]
    assert len({block, first, second}) == 3


def test_synthesized_ids_are_deterministic_per_run_so_replays_match() -> None:
    def reasoning_ids() -> list[str]:
        return [
            e.message_id
            for e in _translated_stream()
            if isinstance(e, ReasoningStartEvent | ReasoningMessageStartEvent)
        ]

    first, second = reasoning_ids(), reasoning_ids()

    assert first == second
    assert len(first) == 3
    assert all("r1" in i for i in first)


def test_each_run_numbers_its_ids_under_its_own_run_id() -> None:
    translate = ThinkingTranslator()
    ids = []
    for run_id in ("r1", "r2"):
        translate(RunStartedEvent(thread_id="t", run_id=run_id))
        event = translate(ThinkingStartEvent())
        assert isinstance(event, ReasoningStartEvent)
        ids.append(event.message_id)

    assert ids[0] != ids[1]
    assert ids[0].replace("r1", "r2") == ids[1]


def test_a_translator_without_a_run_start_still_correlates_ids() -> None:
    translate = ThinkingTranslator()
    start = translate(ThinkingTextMessageStartEvent())
    content = translate(ThinkingTextMessageContentEvent(delta="x"))
    end = translate(ThinkingTextMessageEndEvent())

    ids = {getattr(e, "message_id", None) for e in (start, content, end)}
    assert len(ids) == 1
    assert None not in ids


def test_thinking_content_without_a_start_gets_a_message_id_of_its_own() -> None:
    translate = ThinkingTranslator("r9")
    content = translate(ThinkingTextMessageContentEvent(delta="x"))
    end = translate(ThinkingTextMessageEndEvent())
    again = translate(ThinkingTextMessageContentEvent(delta="y"))

    assert isinstance(content, ReasoningMessageContentEvent)
    assert isinstance(end, ReasoningMessageEndEvent)
    assert isinstance(again, ReasoningMessageContentEvent)
    assert content.message_id == end.message_id
    assert again.message_id != content.message_id


def test_non_thinking_events_pass_through_as_the_same_objects() -> None:
    events = [parse_event(payload) for payload in THINKING_STREAM]

    translated = to_reasoning_events(events)

    for before, after in zip(events, translated, strict=True):
        if not type(before).__name__.startswith("Thinking"):
            assert after is before


def test_to_reasoning_events_refuses_a_single_event() -> None:
    with pytest.raises(TypeError, match="sequence of events"):
        to_reasoning_events(ThinkingEndEvent())  # type: ignore[arg-type]


def test_the_names_users_import_from_the_agui_layer_are_the_codec_ones() -> None:
    import threadstore
    import threadstore.agui
    import threadstore.agui.legacy
    import threadstore.agui.translate
    import threadstore.codec
    import threadstore.codec.thinking

    for name in threadstore.agui.legacy.__all__:
        assert getattr(threadstore.agui.legacy, name) is getattr(threadstore.codec.thinking, name)
    for name in threadstore.agui.translate.__all__:
        assert getattr(threadstore.agui.translate, name) is getattr(threadstore.codec, name)
    for name in ("parse_event", "ThinkingStartEvent"):
        assert getattr(threadstore.agui, name) is getattr(threadstore.codec.thinking, name)
    assert threadstore.agui.translate_messages is threadstore.codec.translate_messages
    assert threadstore.agui.translate_messages is threadstore.codec.translate_messages
