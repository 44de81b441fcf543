"""Event streams: keep-alive comments when quiet, free while frames flow; batched writes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)

from server_support import Frame, GatedAgent, LiveServer, collect_sse, read_sse, run_input
from threadstore.errors import InvalidInputError
from threadstore.server import create_app
from threadstore.server._routes_agui import MAX_EVENTS_PER_WRITE
from threadstore.server._sse import with_keepalive

KEEPALIVE = b": keep-alive\n\n"


class LogSource:
    """Frames the test appends to a log; each call resumes after the last frame yielded."""

    def __init__(self, *frames: bytes) -> None:
        self.log = list(frames)
        self.finished = False
        self.opened = 0
        self._sent = 0
        self._changed = asyncio.Event()

    def append(self, frame: bytes, *, last: bool = False) -> None:
        """Add a frame (the last one when ``last``) and wake the reader."""
        self.log.append(frame)
        self.finished = last
        self._changed.set()

    async def __call__(self) -> AsyncIterator[bytes]:
        """Yield the log from the first frame not yet yielded, waiting for more."""
        self.opened += 1
        while True:
            if self._sent < len(self.log):
                self._sent += 1
                yield self.log[self._sent - 1]
            elif self.finished:
                return
            else:
                self._changed.clear()
                await self._changed.wait()


async def test_a_quiet_stream_gets_keep_alives_and_every_frame_exactly_once() -> None:
    source = LogSource(b"first")
    seen: list[bytes] = []
    async for chunk in with_keepalive(source, interval=0.01):
        seen.append(chunk)
        if chunk == KEEPALIVE and source.log == [b"first"]:
            source.append(b"second", last=True)

    assert [chunk for chunk in seen if chunk != KEEPALIVE] == [b"first", b"second"]
    assert seen[1] == KEEPALIVE
    assert source.opened == 1 + seen.count(KEEPALIVE)  # resumed after each comment


async def test_a_busy_stream_creates_no_task_or_timer_per_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    created = {"timers": 0, "tasks": 0}

    def counting(kind: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            created[kind] += 1
            return method(*args, **kwargs)

        return call

    async def busy() -> AsyncIterator[bytes]:
        for number in range(500):
            await asyncio.sleep(0)  # the reader waits for every frame, as for a live run
            yield b"frame %d" % number

    monkeypatch.setattr(loop, "call_at", counting("timers", loop.call_at))
    monkeypatch.setattr(loop, "create_task", counting("tasks", loop.create_task))
    seen = [chunk async for chunk in with_keepalive(busy, interval=3600)]
    monkeypatch.undo()

    assert len(seen) == 500 and KEEPALIVE not in seen
    assert created["tasks"] == 0
    assert created["timers"] <= 1  # the stream's own keep-alive timer


async def test_a_source_error_reaches_the_reader_after_the_frames_before_it() -> None:
    async def failing() -> AsyncIterator[bytes]:
        yield b"first"
        raise RuntimeError("the source broke")

    seen: list[bytes] = []
    with pytest.raises(RuntimeError, match="the source broke"):
        async for chunk in with_keepalive(failing, interval=10):
            seen.append(chunk)

    assert seen == [b"first"]


async def test_a_disconnect_during_a_quiet_wait_ends_the_stream() -> None:
    source = LogSource(b"first")
    reading = asyncio.Event()

    async def read() -> None:
        async for _ in with_keepalive(source, interval=3600):
            reading.set()

    reader = asyncio.create_task(read())
    await reading.wait()  # the reader now waits for the next frame
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert source.opened == 1


async def test_a_disconnect_arriving_with_a_keep_alive_still_ends_the_stream() -> None:
    closed: list[bool] = []
    reader: asyncio.Task[list[bytes]]

    async def quiet() -> AsyncIterator[bytes]:
        try:
            waiter = asyncio.get_running_loop().create_future()
            # When the keep-alive cancels this wait, the disconnect lands before the
            # reader resumes: one CancelledError carries both.
            waiter.add_done_callback(lambda _: reader.cancel())
            await waiter
            yield b"never"
        finally:
            closed.append(True)

    async def read() -> list[bytes]:
        return [chunk async for chunk in with_keepalive(quiet, interval=0.01)]

    reader = asyncio.create_task(read())
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(10):  # a swallowed disconnect would wait forever
            await reader
    assert reader.cancelled()
    assert closed == [True]


def test_a_keep_alive_interval_must_be_positive() -> None:
    with pytest.raises(InvalidInputError, match="interval"):
        with_keepalive(LogSource(), interval=0)


# --- over HTTP ---------------------------------------------------------------------------


async def _read_until_finished(
    response: httpx.Response, agent: GatedAgent
) -> tuple[list[Frame], int]:
    """Every event frame of ``response``; opens the agent's gate at the first keep-alive."""
    frames: list[Frame] = []
    keepalives = 0
    async for frame in read_sse(response):
        if frame.comment == "keep-alive":
            keepalives += 1
            agent.gate.set()
        elif frame.data is not None:
            frames.append(frame)
    return frames, keepalives


def _deltas(frames: list[Frame]) -> str:
    return "".join(f.data["delta"] for f in frames if f.data is not None and "delta" in f.data)


async def test_a_quiet_run_stream_resumes_after_its_keep_alives_without_gaps_or_repeats() -> None:
    agent = GatedAgent()
    app = create_app("memory://", agent=agent, keepalive_interval=0.05)
    async with LiveServer(app) as server, httpx.AsyncClient() as client:
        try:
            async with client.stream("POST", f"{server.url}/agui", json=run_input()) as response:
                frames, keepalives = await _read_until_finished(response, agent)
        finally:
            agent.gate.set()

    assert keepalives >= 1
    assert [frame.id for frame in frames] == list(range(1, 10))
    assert frames[-1].type == "RUN_FINISHED"
    assert _deltas(frames) == "first half second half"


async def test_a_quiet_connect_stream_resumes_the_live_run_after_its_keep_alives() -> None:
    agent = GatedAgent()
    app = create_app("memory://", agent=agent, keepalive_interval=0.05)
    body = run_input()
    async with LiveServer(app) as server, httpx.AsyncClient() as client:
        try:
            async with client.stream("POST", f"{server.url}/agui", json=body) as live:
                await agent.wait_reached()
                url = f"{server.url}/agui/threads/{body['threadId']}/connect"
                async with client.stream("GET", url) as connected:
                    frames, keepalives = await _read_until_finished(connected, agent)
                await live.aread()
        finally:
            agent.gate.set()

    assert keepalives >= 1
    assert [frame.id for frame in frames if frame.id is not None] == list(range(1, 10))
    assert frames[-1].type == "RUN_FINISHED"
    assert _deltas(frames) == "first half second half"


# --- writes -------------------------------------------------------------------------------


class BodyWrites:
    """The app, counting the body messages (writes) it sends on each path."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.writes: dict[str, int] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]

        async def counted(message: Any) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                self.writes[path] = self.writes.get(path, 0) + 1
            await send(message)

        await self.app(scope, receive, counted)


class BurstAgent:
    """Streams a text message of ``deltas`` deltas without waiting between events."""

    def __init__(self, deltas: int) -> None:
        self.deltas = deltas

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)
        yield TextMessageStartEvent(message_id="answer", role="assistant")
        for index in range(self.deltas):
            yield TextMessageContentEvent(message_id="answer", delta=f"w{index} ")
        yield TextMessageEndEvent(message_id="answer")
        yield RunFinishedEvent(thread_id=input.thread_id, run_id=input.run_id)


async def test_events_that_wait_together_go_out_in_one_write_each_frame_intact() -> None:
    deltas = 300
    app = BodyWrites(create_app("memory://", agent=BurstAgent(deltas)))
    body = run_input()
    resume = f"/agui/threads/{body['threadId']}/runs/{body['runId']}/events"
    async with LiveServer(app) as server, httpx.AsyncClient() as client:
        async with client.stream("POST", f"{server.url}/agui", json=body) as response:
            live = await collect_sse(response)
        async with client.stream("GET", f"{server.url}{resume}") as response:
            resumed = await collect_sse(response)

    events = deltas + 4
    assert (
        [frame.id for frame in live]
        == [frame.id for frame in resumed]
        == list(range(1, events + 1))
    )
    assert [frame.data for frame in live] == [frame.data for frame in resumed]
    assert "".join(f.data["delta"] for f in live if f.type == "TEXT_MESSAGE_CONTENT") == "".join(
        f"w{index} " for index in range(deltas)
    )
    # The finished run's whole log is buffered: one write per MAX_EVENTS_PER_WRITE events.
    assert app.writes[resume] == -(-events // MAX_EVENTS_PER_WRITE) == 2
    # Live, the agent outruns its reader: far fewer writes than events.
    assert app.writes["/agui"] < events // 10
