"""The scripted agent and the bare AG-UI server of ``bench_server.py``.

Both servers import this module (``threadstore serve --agent server_agent:ScriptedAgent``
and ``python server_agent.py bare PORT``), so they stream the very same agent. It stays
small: the server processes should not pay for the benchmark client's imports.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = [
    "EVENTS_PER_RUN",
    "PACE_ENV",
    "PacedAgent",
    "PassThrough",
    "ScriptedAgent",
    "Transcript",
    "build_app",
    "build_bare_app",
    "transcript",
]

DELTA = 8
"""Characters per delta, about a token."""
SENTENCE = (
    "The forecast for Paris shows light rain in the morning, clearing by noon, with a high"
    " of 21 degrees; I will check the hourly data and the wind before I answer you. "
)
TEXT_DELTAS = (24, 24, 25)
"""Deltas of the run's three assistant text messages."""
ARGS_DELTAS = 16
TOOL_NAME = "get_weather"
TOOL_RESULT = '{"high": 21, "low": 12, "rain_mm": 3.5, "wind_kmh": 14}'
EVENTS_PER_RUN = 2 + sum(n + 2 for n in TEXT_DELTAS) + ARGS_DELTAS + 3
"""RUN_STARTED, three text messages (start, deltas, end), a tool call, RUN_FINISHED: 100."""


def _text(deltas: int, offset: int) -> str:
    size = deltas * DELTA
    start = offset % len(SENTENCE)
    return (SENTENCE * (size // len(SENTENCE) + 2))[start : start + size]


def _arguments() -> str:
    head, tail = '{"city": "Paris", "days": 7, "units": "metric", "note": "', '"}'
    return head + "x" * (ARGS_DELTAS * DELTA - len(head) - len(tail)) + tail


TEXTS = tuple(_text(n, 17 * k) for k, n in enumerate(TEXT_DELTAS))
"""The three assistant texts (built once: the agent should cost as little as it can)."""
ARGUMENTS = _arguments()
"""The tool call's arguments, 128 characters of JSON."""


@dataclass(frozen=True)
class Transcript:
    """What one run streams, and so what the store must hold once it is done."""

    texts: dict[str, str]
    """Assistant message id -> full text."""
    tool_call_id: str
    tool_parent_id: str
    arguments: str
    result_message_id: str
    result: str


def transcript(run_id: str) -> Transcript:
    """The content of the run ``run_id``: ids derive from it, text is fixed."""
    texts = {f"{run_id}-a{index}": text for index, text in enumerate(TEXTS)}
    return Transcript(
        texts=texts,
        tool_call_id=f"{run_id}-call",
        tool_parent_id=f"{run_id}-a0",
        arguments=ARGUMENTS,
        result_message_id=f"{run_id}-result",
        result=TOOL_RESULT,
    )


def _chunks(text: str) -> Iterator[str]:
    for start in range(0, len(text), DELTA):
        yield text[start : start + DELTA]


def _text_message(message_id: str, text: str) -> Iterator[BaseEvent]:
    yield TextMessageStartEvent(message_id=message_id, role="assistant")
    for delta in _chunks(text):
        yield TextMessageContentEvent(message_id=message_id, delta=delta)
    yield TextMessageEndEvent(message_id=message_id)


def script(thread_id: str, run_id: str) -> Iterator[BaseEvent]:
    """Build the run's events one by one, as a model stream would produce them."""
    plan = transcript(run_id)
    first, *rest = plan.texts.items()
    yield RunStartedEvent(thread_id=thread_id, run_id=run_id)
    yield from _text_message(*first)
    yield ToolCallStartEvent(
        tool_call_id=plan.tool_call_id,
        tool_call_name=TOOL_NAME,
        parent_message_id=plan.tool_parent_id,
    )
    for delta in _chunks(plan.arguments):
        yield ToolCallArgsEvent(tool_call_id=plan.tool_call_id, delta=delta)
    yield ToolCallEndEvent(tool_call_id=plan.tool_call_id)
    yield ToolCallResultEvent(
        message_id=plan.result_message_id,
        tool_call_id=plan.tool_call_id,
        content=plan.result,
        role="tool",
    )
    for message in rest:
        yield from _text_message(*message)
    yield RunFinishedEvent(thread_id=thread_id, run_id=run_id)


class ScriptedAgent:
    """Streams :func:`script` with no delay, yielding to the event loop before each event.

    The ``asyncio.sleep(0)`` stands in for the await on the model's stream that every
    real agent has; without it one run would hog the loop until its last event.
    """

    name = "scripted"

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Yield the run's 100 events."""
        for event in script(input.thread_id, input.run_id):
            await asyncio.sleep(0)
            yield event


PACE_ENV = "THREADSTORE_BENCH_EVENTS_PER_SECOND"
"""The paced agent's events per second per run (``bench_soak.py`` sets it for the server)."""


class PacedAgent:
    """Streams :func:`script` at a model's pace: event ``n`` is due ``n / rate`` s after the start.

    Due times are absolute, so a run that was held up catches up instead of drifting.
    """

    name = "paced"

    def __init__(self) -> None:
        import os

        self.rate = float(os.environ.get(PACE_ENV, "50"))

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Yield the run's 100 events, ``rate`` per second."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        for index, event in enumerate(script(input.thread_id, input.run_id)):
            await asyncio.sleep(max(0.0, start + index / self.rate - loop.time()))
            yield event


def build_bare_app() -> FastAPI:
    """A plain FastAPI AG-UI endpoint over :class:`ScriptedAgent`: SSE out, no storage."""
    from ag_ui.encoder import EventEncoder
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse

    app = FastAPI()
    agent = ScriptedAgent()
    encoder = EventEncoder()

    @app.post("/agui")
    async def run_agent(run_input: RunAgentInput) -> StreamingResponse:
        async def frames() -> AsyncIterator[str]:
            async for event in agent.run(run_input):
                yield encoder.encode(event)

        return StreamingResponse(
            frames(), media_type=encoder.get_content_type(), headers={"Cache-Control": "no-cache"}
        )

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


class PassThrough:
    """A storage agent that stores nothing: ``create_app`` minus persistence (diagnostics)."""

    def __init__(
        self,
        name: str,
        user_uuid: UUID,
        chat_repo: object,
        message_repo: object,
        inner_agent: ScriptedAgent,
        **options: object,
    ) -> None:
        self.name = name
        self.user_uuid = user_uuid
        self.inner = inner_agent

    def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """The inner agent's stream, untouched."""
        return self.inner.run(input)


def build_app(kind: str) -> FastAPI:
    """``bare``: :func:`build_bare_app`; ``no-storage``: threadstore's app, PassThrough."""
    if kind == "bare":
        return build_bare_app()
    if kind == "no-storage":
        from threadstore.server import create_app

        return create_app("memory://", agent=ScriptedAgent(), storage_agent=PassThrough)
    raise SystemExit(f"unknown app {kind!r}")


def serve(kind: str, port: int, workers: int = 1) -> None:
    """Serve ``build_app(kind)`` the way ``threadstore serve`` runs its app (``workers``
    processes sharing the port, as ``threadstore serve --workers`` starts them)."""
    import uvicorn

    options: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": port,
        "log_level": "warning",
        "timeout_graceful_shutdown": 5,
    }
    if workers == 1:
        uvicorn.run(build_app(kind), **options)
    else:
        os.environ["SERVER_AGENT_APP"] = kind  # the workers import this module afresh
        uvicorn.run("server_agent:app_of_worker", factory=True, workers=workers, **options)


def app_of_worker() -> FastAPI:
    """The app of one worker of :func:`serve` (uvicorn calls it in each process)."""
    return build_app(os.environ["SERVER_AGENT_APP"])


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1)
