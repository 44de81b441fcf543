"""The built-in demo agent: offline, deterministic, and exercises every part of a turn.

For each user message it streams a short reasoning step, a one-line preamble, a tool
call with streamed JSON arguments and its result, then the answer. The tool is
``calculator`` when the message contains numbers (it evaluates the arithmetic in it,
or adds the numbers up) and ``clock`` otherwise. It also keeps a small shared state
(``{"turns": n, "lastTool": ...}``). ``delay`` seconds separate streamed chunks
(0 for tests and benchmarks).
"""

from __future__ import annotations

import ast
import asyncio
import json
import math
import operator
import re
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

from ag_ui.core import (
    BaseEvent,
    ReasoningMessageContentEvent,
    RunAgentInput,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from threadstore.codec import now_ms, run_finished, run_started
from threadstore.server._events import reasoning_closed, reasoning_opened

__all__ = ["DEFAULT_DEMO_DELAY", "DemoAgent", "evaluate_arithmetic", "last_user_text"]

DEFAULT_DEMO_DELAY = 0.03
"""Seconds between streamed chunks: slow enough to watch, fast enough not to wait."""

_MAX_SCANNED_CHARS = 2000
_EXPRESSION_RE = re.compile(r"[-+*/().\d\s]*\d[-+*/().\d\s]*")
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")
_OPERATORS: dict[type[ast.AST], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def last_user_text(run_input: RunAgentInput) -> str:
    """Return the text of the newest user message of the input ('' when there is none)."""
    for message in reversed(run_input.messages):
        if message.role != "user":
            continue
        content = message.content
        if isinstance(content, str):
            return content
        return " ".join(str(getattr(part, "text", "")) for part in content).strip()
    return ""


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return float(_OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right)))
    raise ValueError("not plain arithmetic")


def evaluate_arithmetic(text: str) -> tuple[str, float] | None:
    """Find arithmetic in ``text``: (expression, value), the sum of its numbers, or None."""
    text = text[:_MAX_SCANNED_CHARS]  # bounds the regex and parser work on huge messages
    candidates = sorted(
        (m.strip() for m in _EXPRESSION_RE.findall(text) if m.strip()), key=len, reverse=True
    )
    for candidate in candidates:
        if not any(op in candidate.lstrip("-") for op in "+-*/"):
            continue
        if len(candidate) > 200:
            continue  # keep the demo's work bounded, whatever the input
        try:
            value = _evaluate(ast.parse(candidate, mode="eval"))
        except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError):
            continue
        if math.isfinite(value):
            return candidate, value
    numbers = [float(n) for n in _NUMBER_RE.findall(text)[:50]]
    numbers = [n for n in numbers if math.isfinite(n)]
    if not numbers or not math.isfinite(total := math.fsum(numbers)):
        return None
    return " + ".join(_format_number(n) for n in numbers), total


def _format_number(value: float) -> str:
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [text]


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*", text) or [text]


class DemoAgent:
    """A scripted, offline agent that streams reasoning, a tool call and an answer."""

    name = "demo"

    def __init__(self, delay: float = DEFAULT_DEMO_DELAY) -> None:
        if delay < 0:
            raise ValueError(f"delay must be >= 0, got {delay}")
        self.delay = delay

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Yield one demo turn answering the newest user message of ``input``."""
        ids = _Ids()
        question = last_user_text(input)
        tool, args, result, answer = self._plan(question)
        turns = sum(1 for m in input.messages if m.role == "user")

        yield run_started(input.thread_id, input.run_id)
        yield StateSnapshotEvent(snapshot={"turns": turns, "lastTool": tool}, timestamp=now_ms())

        thought = f"The user wrote {len(question)} characters. " + (
            f"I see arithmetic, so I will use the calculator on {args['expression']}."
            if tool == "calculator"
            else "No numbers to compute, so I will check the clock."
        )
        for event in reasoning_opened(ids.reasoning):
            yield event
        for piece in _words(thought):
            await self._pause()
            yield ReasoningMessageContentEvent(
                message_id=ids.reasoning, delta=piece, timestamp=now_ms()
            )
        for event in reasoning_closed(ids.reasoning):
            yield event

        async for event in self._text(ids.preamble, "Let me work that out."):
            yield event

        await self._pause()
        yield ToolCallStartEvent(
            tool_call_id=ids.tool_call,
            tool_call_name=tool,
            parent_message_id=ids.preamble,
            timestamp=now_ms(),
        )
        for piece in _chunks(json.dumps(args), 8):
            await self._pause()
            yield ToolCallArgsEvent(tool_call_id=ids.tool_call, delta=piece, timestamp=now_ms())
        yield ToolCallEndEvent(tool_call_id=ids.tool_call, timestamp=now_ms())
        await self._pause()
        yield ToolCallResultEvent(
            message_id=ids.tool_result,
            tool_call_id=ids.tool_call,
            content=json.dumps(result),
            role="tool",
            timestamp=now_ms(),
        )

        async for event in self._text(ids.answer, answer):
            yield event
        yield run_finished(input.thread_id, input.run_id)

    def _plan(self, question: str) -> tuple[str, dict[str, Any], dict[str, Any], str]:
        """Return (tool name, its arguments, its result, the answer text)."""
        found = evaluate_arithmetic(question)
        if found is not None:
            expression, value = found
            shown = _format_number(value)
            return (
                "calculator",
                {"expression": expression},
                {"value": value},
                f"{expression} = {shown}. I used the calculator tool to be sure.",
            )
        now = datetime.now(UTC).replace(microsecond=0)
        return (
            "clock",
            {"timezone": "UTC"},
            {"utc": now.isoformat()},
            f"It is {now:%H:%M} UTC on {now:%A %d %B %Y}. "
            "Ask me some arithmetic, like 'what is 12 * 7 + 3?', to see the calculator.",
        )

    async def _text(self, message_id: str, text: str) -> AsyncIterator[BaseEvent]:
        yield TextMessageStartEvent(message_id=message_id, role="assistant", timestamp=now_ms())
        for piece in _words(text):
            await self._pause()
            yield TextMessageContentEvent(message_id=message_id, delta=piece, timestamp=now_ms())
        yield TextMessageEndEvent(message_id=message_id, timestamp=now_ms())

    async def _pause(self) -> None:
        # sleep(0) still yields to the loop, so a zero-delay run stays cancellable.
        await asyncio.sleep(self.delay)


class _Ids:
    """Fresh ids for the messages and tool call of one turn."""

    def __init__(self) -> None:
        turn = uuid4().hex[:12]
        self.reasoning = f"reasoning-{turn}"
        self.preamble = f"msg-{turn}-1"
        self.tool_call = f"call-{turn}"
        self.tool_result = f"tool-{turn}"
        self.answer = f"msg-{turn}-2"
