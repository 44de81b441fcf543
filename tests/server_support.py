"""Helpers for the server tests: a real uvicorn server on a free port, and an SSE reader.

Import from any test: ``from server_support import LiveServer, read_sse, run_input``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

import httpx
import uvicorn
from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)
from starlette.types import ASGIApp

__all__ = [
    "Frame",
    "GatedAgent",
    "LiveServer",
    "answer_in_halves",
    "collect_sse",
    "read_sse",
    "run_input",
    "served_with_store",
]


class LiveServer:
    """Runs an ASGI app under uvicorn on 127.0.0.1 in a background thread."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        """Start serving; return once the app's start-up has completed."""
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the server thread stopped during start-up")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Ask the server to exit and wait for its shutdown (lifespan included)."""
        self._server.should_exit = True
        await asyncio.to_thread(self._thread.join)
        self._sock.close()

    async def __aenter__(self) -> LiveServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


@asynccontextmanager
async def served_with_store(
    url: str, agent: Any, **app_options: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """A live server of ``create_app(url, agent=agent, ...)``, a client of it, and a store of
    its own on the same database, to look at what got stored."""
    from threadstore import open_store
    from threadstore.server import create_app

    app = create_app(url, agent=agent, sweep_interval=None, **app_options)
    async with LiveServer(app) as server:
        store = await open_store(url, setup=False)
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
                yield client, store
        finally:
            await store.close()


@dataclass
class Frame:
    """One SSE frame: an event (``id`` + ``data``) or a comment (``comment``)."""

    id: int | None = None
    data: dict[str, Any] | None = None
    comment: str | None = None

    @property
    def type(self) -> str | None:
        """The AG-UI event type of a data frame."""
        return None if self.data is None else self.data.get("type")


async def read_sse(response: httpx.Response) -> AsyncIterator[Frame]:
    """Yield the frames of a streamed ``text/event-stream`` response as they arrive."""
    frame_id: int | None = None
    data: list[str] = []
    async for line in _sse_lines(response):
        if line == "":
            if data:
                yield Frame(id=frame_id, data=json.loads("\n".join(data)))
            frame_id, data = None, []
        elif line.startswith(":"):
            yield Frame(comment=line[1:].strip())
        elif line.startswith("id:"):
            frame_id = int(line[3:].strip())
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


async def _sse_lines(response: httpx.Response) -> AsyncIterator[str]:
    # SSE lines end at CR/LF only; httpx's aiter_lines also splits on U+2028 and friends.
    pending = ""
    async for text in response.aiter_text():
        pending += text
        *lines, pending = pending.split("\n")
        for line in lines:
            yield line.removesuffix("\r")
    if pending:
        yield pending


async def collect_sse(response: httpx.Response) -> list[Frame]:
    """Return every event frame (comments left out) of a streamed response."""
    return [frame async for frame in read_sse(response) if frame.data is not None]


def run_input(
    text: str = "What is 12 * 7 + 3?",
    *,
    thread_id: str | None = None,
    run_id: str | None = None,
    history: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Return a RunAgentInput body (wire JSON) with one new user message."""
    messages = [*(history or []), {"id": f"m-{uuid4().hex[:8]}", "role": "user", "content": text}]
    return {
        "threadId": thread_id or f"thread-{uuid4().hex[:8]}",
        "runId": run_id or f"run-{uuid4().hex[:8]}",
        "messages": messages,
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


async def answer_in_halves(
    input: RunAgentInput, snapshot: dict[str, Any], between: Callable[[], Awaitable[None]]
) -> AsyncIterator[BaseEvent]:
    """A run whose answer streams in two halves, awaiting ``between()`` in the middle."""
    message_id = f"answer-{input.run_id}"
    yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)
    yield StateSnapshotEvent(snapshot=snapshot)
    yield TextMessageStartEvent(message_id=message_id, role="assistant")
    for word in ("first ", "half "):
        yield TextMessageContentEvent(message_id=message_id, delta=word)
    await between()
    for word in ("second ", "half"):
        yield TextMessageContentEvent(message_id=message_id, delta=word)
    yield TextMessageEndEvent(message_id=message_id)
    yield RunFinishedEvent(thread_id=input.thread_id, run_id=input.run_id)


class GatedAgent:
    """Streams an answer in two halves; the second waits until the test opens ``gate``.

    The gate is a thread event because the server runs in another thread's loop;
    ``reached`` is set once the first half has been produced.
    """

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.reached = threading.Event()

    def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Yield the first half, wait for the gate, yield the second half."""
        return answer_in_halves(input, {"phase": "first"}, self._between)

    async def _between(self) -> None:
        self.reached.set()
        await asyncio.to_thread(self.gate.wait)

    async def wait_reached(self) -> None:
        """Wait until a run has produced its first half."""
        await asyncio.to_thread(self.reached.wait)


@asynccontextmanager
async def demo_client(store: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an app serving ``store`` with the demo agent, through its ASGI interface."""
    from threadstore.server import create_app

    app = create_app(store, agent="demo", demo_delay=0)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            yield http
