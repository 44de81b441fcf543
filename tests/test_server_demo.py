"""The demo agent, agent loading and SSE framing, without a server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ag_ui.core import BaseEvent, RunAgentInput, TextMessageContentEvent
from ag_ui_validate.pytest_plugin import assert_valid_agui

from server_support import GatedAgent, run_input
from threadstore.errors import ConfigurationError
from threadstore.server import DemoAgent
from threadstore.server._agents import load_agent
from threadstore.server._demo_agent import evaluate_arithmetic
from threadstore.server._sse import encode_frame


async def _demo_events(text: str) -> list[BaseEvent]:
    run = RunAgentInput.model_validate(run_input(text))
    return [event async for event in DemoAgent(delay=0).run(run)]


def _wire(events: list[BaseEvent]) -> list[dict[str, Any]]:
    return [event.model_dump(mode="json", by_alias=True) for event in events]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("what is 12 * 7 + 3?", ("12 * 7 + 3", 87.0)),
        ("(2 + 3) * 4 please", ("(2 + 3) * 4", 20.0)),
        ("add 3 and 4", ("3 + 4", 7.0)),
        ("10 / 4", ("10 / 4", 2.5)),
        ("hello", None),
        ("9" * 400, None),
    ],
)
def test_the_demo_finds_the_arithmetic_in_a_message(
    text: str, expected: tuple[str, float] | None
) -> None:
    assert evaluate_arithmetic(text) == expected


async def test_a_demo_turn_reasons_calls_the_calculator_and_answers() -> None:
    events = await _demo_events("what is 12 * 7 + 3?")
    wire = _wire(events)

    args = "".join(e["delta"] for e in wire if e["type"] == "TOOL_CALL_ARGS")
    result = next(e for e in wire if e["type"] == "TOOL_CALL_RESULT")
    start = next(e for e in wire if e["type"] == "TOOL_CALL_START")
    text = "".join(e["delta"] for e in wire if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert start["toolCallName"] == "calculator"
    assert json.loads(args) == {"expression": "12 * 7 + 3"}
    assert json.loads(result["content"]) == {"value": 87.0}
    assert "12 * 7 + 3 = 87" in text
    assert any(e["type"] == "REASONING_MESSAGE_CONTENT" for e in wire)
    assert_valid_agui(wire)


async def test_without_numbers_the_demo_checks_the_clock() -> None:
    wire = _wire(await _demo_events("good morning"))

    start = next(e for e in wire if e["type"] == "TOOL_CALL_START")
    result = json.loads(next(e for e in wire if e["type"] == "TOOL_CALL_RESULT")["content"])
    assert start["toolCallName"] == "clock"
    assert "utc" in result
    assert_valid_agui(wire)


async def test_the_demo_is_the_same_turn_every_time_apart_from_ids() -> None:
    first, second = await _demo_events("1 + 1"), await _demo_events("1 + 1")

    def shape(events: list[BaseEvent]) -> list[tuple[str, str]]:
        return [(e.type, getattr(e, "delta", "")) for e in events]

    assert shape(first) == shape(second)


def test_agents_load_from_a_spec() -> None:
    assert isinstance(load_agent("demo"), DemoAgent)
    assert isinstance(load_agent("server_support:GatedAgent"), GatedAgent)
    with pytest.raises(ConfigurationError, match="module:attribute"):
        load_agent("nonsense")
    with pytest.raises(ConfigurationError, match="cannot import"):
        load_agent("no_such_module_here:agent")
    with pytest.raises(ConfigurationError, match="no attribute"):
        load_agent("server_support:Missing")
    with pytest.raises(ConfigurationError, match="without arguments"):
        load_agent("json:dumps")


def test_frames_carry_their_id_and_escape_line_separators() -> None:
    frame = encode_frame(TextMessageContentEvent(message_id="m", delta="a\u2028b"), 7)

    assert frame.startswith(b"id: 7\ndata: {")
    assert frame.endswith(b"\n\n")
    assert frame.count(b"\n") == 3
    assert json.loads(frame.split(b"data: ")[1])["delta"] == "a\u2028b"
