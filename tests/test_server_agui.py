"""The AG-UI endpoints over real HTTP: streaming, resume, disconnect, cancel, connect."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import (
    BaseEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from ag_ui_validate.pytest_plugin import (
    assert_valid_agui,
    assert_valid_agui_endpoint,
    validate_agui_endpoint,
)

from server_support import Frame, GatedAgent, LiveServer, collect_sse, read_sse, run_input
from threadstore.server import DemoAgent, create_app

Serve = Callable[..., AbstractAsyncContextManager[LiveServer]]


@pytest.fixture
def serve(tmp_path: Path) -> Serve:
    """Start a live server on a SQLite file in ``tmp_path`` serving the given agent."""

    @asynccontextmanager
    async def start(agent: Any, **options: Any) -> AsyncIterator[LiveServer]:
        app = create_app(f"sqlite:///{tmp_path / 'threadstore.db'}", agent=agent, **options)
        server = LiveServer(app)
        await server.start()
        try:
            yield server
        finally:
            if isinstance(agent, GatedAgent):
                agent.gate.set()  # release a run still waiting, so shutdown can finish
            await server.stop()

    return start


def _events(frames: list[Frame]) -> list[dict[str, Any]]:
    return [frame.data for frame in frames if frame.data is not None]


async def _post_run(
    client: httpx.AsyncClient, server: LiveServer, body: dict[str, Any]
) -> list[Frame]:
    async with client.stream("POST", f"{server.url}/agui", json=body) as response:
        assert response.status_code == 200
        return await collect_sse(response)


async def test_a_demo_run_streams_numbered_events_over_sse(serve: Serve) -> None:
    async with serve(DemoAgent(delay=0)) as server, httpx.AsyncClient() as client:
        body = run_input("What is 12 * 7 + 3?")
        async with client.stream("POST", f"{server.url}/agui", json=body) as response:
            headers = response.headers
            frames = await collect_sse(response)

    assert headers["content-type"].startswith("text/event-stream")
    assert headers["cache-control"] == "no-cache"
    assert [frame.id for frame in frames] == list(range(1, len(frames) + 1))
    types = [frame.type for frame in frames]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    assert {"REASONING_MESSAGE_CONTENT", "TOOL_CALL_ARGS", "TOOL_CALL_RESULT"} <= set(types)
    answer = "".join(
        frame.data["delta"]
        for frame in frames
        if frame.data is not None and frame.type == "TEXT_MESSAGE_CONTENT"
    )
    assert "12 * 7 + 3 = 87" in answer
    assert_valid_agui(_events(frames))


async def test_the_live_run_endpoint_passes_ag_ui_validate(serve: Serve) -> None:
    async with serve(DemoAgent(delay=0.001)) as server:
        await assert_valid_agui_endpoint(f"{server.url}/agui", input=run_input("add 2 and 40"))


async def test_resuming_after_a_disconnect_gets_exactly_the_remaining_events(
    serve: Serve,
) -> None:
    agent = GatedAgent()
    async with serve(agent) as server, httpx.AsyncClient() as client:
        body = run_input("hello")
        thread, run = body["threadId"], body["runId"]
        before: list[Frame] = []
        async with client.stream("POST", f"{server.url}/agui", json=body) as response:
            async for frame in read_sse(response):
                if frame.data is not None:
                    before.append(frame)
                if frame.type == "TEXT_MESSAGE_CONTENT":
                    break  # the client drops the connection mid-stream
        events_url = f"{server.url}/agui/threads/{thread}/runs/{run}/events"
        headers = {"Last-Event-ID": str(before[-1].id)}
        async with client.stream("GET", events_url, headers=headers) as resumed:
            assert resumed.status_code == 200
            agent.gate.set()
            after = await collect_sse(resumed)
        async with client.stream("GET", events_url, params={"after": 0}) as replay:
            everything = await collect_sse(replay)

    assert [f.id for f in before] == list(range(1, len(before) + 1))
    assert [f.id for f in after] == list(range(len(before) + 1, len(everything) + 1))
    assert [f.data for f in before + after] == [f.data for f in everything]
    assert after[-1].type == "RUN_FINISHED"
    assert_valid_agui(_events(before + after))


async def test_a_resume_after_an_ended_runs_last_event_answers_204(serve: Serve) -> None:
    # Nothing is left to send: an empty 200 stream would make an EventSource reconnect
    # for ever; a 204 is its signal to stop. One event earlier still streams the end.
    async with serve(DemoAgent(delay=0)) as server, httpx.AsyncClient() as client:
        body = run_input("hello")
        frames = await _post_run(client, server, body)
        last = max(f.id for f in frames if f.id is not None)
        url = f"{server.url}/agui/threads/{body['threadId']}/runs/{body['runId']}/events"
        done = await client.get(url, headers={"Last-Event-ID": str(last)})
        async with client.stream("GET", url, params={"after": last - 1}) as resumed:
            rest = await collect_sse(resumed)
        beyond = await client.get(url, params={"after": last + 1})

    assert (done.status_code, done.content) == (204, b"")
    assert [f.type for f in rest] == ["RUN_FINISHED"]
    assert beyond.status_code == 422


async def test_a_resumed_stream_passes_ag_ui_validate(serve: Serve) -> None:
    async with serve(DemoAgent(delay=0)) as server, httpx.AsyncClient() as client:
        body = run_input("what is 6 * 7")
        await _post_run(client, server, body)
        url = f"{server.url}/agui/threads/{body['threadId']}/runs/{body['runId']}/events"
        await assert_valid_agui_endpoint(url, method="GET")


async def test_a_client_that_disconnects_does_not_stop_the_run_or_its_history(
    serve: Serve,
) -> None:
    agent = GatedAgent()
    async with serve(agent) as server, httpx.AsyncClient() as client:
        body = run_input("hello")
        async with client.stream("POST", f"{server.url}/agui", json=body) as response:
            async for frame in read_sse(response):
                if frame.type == "TEXT_MESSAGE_CONTENT":
                    break
        agent.gate.set()
        url = f"{server.url}/agui/threads/{body['threadId']}/runs/{body['runId']}/events"
        async with client.stream("GET", url, params={"after": 0}) as rest:
            await collect_sse(rest)  # returns once the run is over
        chats = (await client.get(f"{server.url}/api/chats")).json()["items"]
        messages_url = f"{server.url}/api/chats/{chats[0]['chat_uuid']}/messages"
        messages = (await client.get(messages_url)).json()["items"]

    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["content"] == "first half second half"
    assert messages[1]["status"] == "complete"


async def test_cancel_stops_a_live_run_and_marks_its_records_interrupted(serve: Serve) -> None:
    agent = GatedAgent()
    async with serve(agent) as server, httpx.AsyncClient() as client:
        body = run_input("hello")
        base = f"{server.url}/agui/threads/{body['threadId']}/runs/{body['runId']}"
        frames: list[Frame] = []
        async with client.stream("POST", f"{server.url}/agui", json=body) as response:
            async for frame in read_sse(response):
                if frame.data is not None:
                    frames.append(frame)
                if frame.type == "TEXT_MESSAGE_CONTENT" and len(frames) == 5:
                    cancel = await client.post(f"{base}/cancel")
        again = await client.post(f"{base}/cancel")
        chats = (await client.get(f"{server.url}/api/chats")).json()["items"]
        messages_url = f"{server.url}/api/chats/{chats[0]['chat_uuid']}/messages"
        messages = (await client.get(messages_url)).json()["items"]

    assert cancel.status_code == 200
    assert cancel.json() == {
        "thread_id": body["threadId"],
        "run_id": body["runId"],
        "cancelled": True,
        "status": "interrupted",
    }
    assert again.json()["cancelled"] is False
    assert frames[-1].type == "RUN_ERROR"
    assert frames[-1].data is not None and frames[-1].data["code"] == "CANCELLED"
    assert messages[-1]["role"] == "assistant"
    assert messages[-1]["status"] == "interrupted"
    assert messages[-1]["content"] == "first half "


async def test_quiet_streams_carry_keep_alive_comments(serve: Serve) -> None:
    agent = GatedAgent()
    async with serve(agent, keepalive_interval=0.05) as server, httpx.AsyncClient() as client:
        comments: list[str] = []
        async with client.stream("POST", f"{server.url}/agui", json=run_input()) as response:
            async for frame in read_sse(response):
                if frame.comment is not None:
                    comments.append(frame.comment)
                    agent.gate.set()  # the run resumes only after a keep-alive arrived

    assert comments and set(comments) == {"keep-alive"}


@pytest.mark.parametrize(
    "route",
    [
        pytest.param("{thread}/connect", id="connect"),
        pytest.param("{thread}/runs/{run}/events?snapshots=true", id="resume-with-snapshots"),
    ],
)
async def test_connect_and_a_resume_with_snapshots_hydrate_then_stream_the_live_run(
    serve: Serve, route: str
) -> None:
    agent = GatedAgent()
    async with serve(agent) as server, httpx.AsyncClient() as client:
        first = run_input("first question")
        agent.gate.set()
        await _post_run(client, server, first)
        agent.gate.clear()
        second = run_input(
            "second question", thread_id=first["threadId"], history=first["messages"]
        )
        async with client.stream("POST", f"{server.url}/agui", json=second) as live:
            async for frame in read_sse(live):
                if frame.type == "TEXT_MESSAGE_CONTENT":
                    break
            path = route.format(thread=second["threadId"], run=second["runId"])
            # A browser's EventSource sends its last id again: these streams are whole anyway.
            url, last_id = f"{server.url}/agui/threads/{path}", {"Last-Event-ID": "4"}
            async with client.stream("GET", url, headers=last_id) as connected:
                frames: list[Frame] = []
                async for frame in read_sse(connected):
                    if frame.data is None:
                        continue
                    frames.append(frame)
                    if frame.type == "STATE_SNAPSHOT":
                        agent.gate.set()

    types = [frame.type for frame in frames]
    assert types[:3] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
    assert frames[0].id == 1
    assert frames[0].data is not None and frames[0].data["runId"] == second["runId"]
    snapshot = frames[1].data["messages"] if frames[1].data else []
    assert [(m["role"], m.get("content")) for m in snapshot] == [
        ("user", "first question"),
        ("assistant", "first half second half"),
        ("user", "second question"),
        ("assistant", ""),  # the live run's answer, named empty: its events fill it in
    ]
    run_ids = [frame.id for frame in frames[3:]]
    assert run_ids == list(range(2, 2 + len(run_ids)))
    live_text = "".join(f.data["delta"] for f in frames if f.data is not None and "delta" in f.data)
    assert live_text == "first half second half"
    assert types[-1] == "RUN_FINISHED"
    assert_valid_agui(_events(frames))


class OpeningAgent:
    """Streams a text message, a reasoning message, then opens a tool call with no parent
    and waits for ``gate`` before ending it."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Yield the run; the tool call stays open until the gate opens."""
        yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)
        yield TextMessageStartEvent(message_id="text", role="assistant")
        yield TextMessageContentEvent(message_id="text", delta="Let me think.")
        yield TextMessageEndEvent(message_id="text")
        yield ReasoningStartEvent(message_id="thinking")
        yield ReasoningMessageStartEvent(message_id="thought", role="reasoning")
        yield ReasoningMessageContentEvent(message_id="thought", delta="Which clock?")
        yield ReasoningMessageEndEvent(message_id="thought")
        yield ReasoningEndEvent(message_id="thinking")
        yield ToolCallStartEvent(tool_call_id="call", tool_call_name="clock")
        await asyncio.to_thread(self.gate.wait)
        yield ToolCallEndEvent(tool_call_id="call")
        yield RunFinishedEvent(thread_id=input.thread_id, run_id=input.run_id)


async def test_connect_names_what_the_replayed_run_opens_empty_in_the_runs_order(
    serve: Serve,
) -> None:
    agent = OpeningAgent()
    body = run_input("what time is it?")
    try:
        async with serve(agent) as server, httpx.AsyncClient() as client:
            async with client.stream("POST", f"{server.url}/agui", json=body) as live:
                async for frame in read_sse(live):
                    if frame.type == "TOOL_CALL_START":
                        break
            url = f"{server.url}/agui/threads/{body['threadId']}/connect"
            async with client.stream("GET", url) as connected:
                frames: list[Frame] = []
                async for frame in read_sse(connected):
                    if frame.data is not None:
                        frames.append(frame)
                    if frame.type == "STATE_SNAPSHOT":
                        agent.gate.set()
    finally:
        agent.gate.set()

    snapshot = frames[1].data["messages"] if frames[1].data else []
    # What an AG-UI client makes of each opening event, in the order the run sent them:
    # a reconnecting client's copies are reset there, and the replay fills them in.
    assert snapshot[1:] == [
        {"id": "text", "role": "assistant", "content": ""},
        {"id": "thought", "role": "reasoning", "content": ""},
        {"id": "call", "role": "assistant", "toolCalls": []},
    ]
    assert [f.type for f in frames][-2:] == ["TOOL_CALL_END", "RUN_FINISHED"]
    assert_valid_agui(_events(frames))


async def test_connect_to_an_idle_thread_passes_ag_ui_validate(serve: Serve) -> None:
    async with serve(DemoAgent(delay=0)) as server, httpx.AsyncClient() as client:
        body = run_input("what is 2 + 2")
        await _post_run(client, server, body)
        url = f"{server.url}/agui/threads/{body['threadId']}/connect"
        report = await validate_agui_endpoint(url, method="GET")
        async with client.stream("GET", url) as response:
            frames = await collect_sse(response)

    assert report.summary.errors == 0
    assert [f.type for f in frames] == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "STATE_SNAPSHOT",
        "RUN_FINISHED",
    ]
    roles = [m["role"] for m in frames[1].data["messages"]] if frames[1].data else []
    assert roles[0] == "user" and "assistant" in roles and "tool" in roles
    assert frames[2].data is not None and frames[2].data["snapshot"]["lastTool"] == "calculator"


async def test_stopping_and_starting_the_server_keeps_the_history(serve: Serve) -> None:
    body = run_input("what is 1 + 1")
    async with serve(DemoAgent(delay=0)) as server, httpx.AsyncClient() as client:
        await _post_run(client, server, body)
    async with serve(DemoAgent(delay=0)) as server, httpx.AsyncClient() as client:
        chats = (await client.get(f"{server.url}/api/chats")).json()["items"]
        chat = chats[0]
        messages_url = f"{server.url}/api/chats/{chat['chat_uuid']}/messages"
        messages = (await client.get(messages_url)).json()["items"]

    assert chat["thread_id"] == body["threadId"]
    assert messages[0]["content"] == "what is 1 + 1"
    assert "1 + 1 = 2" in messages[-1]["content"]
    assert all(m["status"] == "complete" for m in messages)


async def test_starting_a_run_that_is_still_live_is_a_conflict(serve: Serve) -> None:
    agent = GatedAgent()
    async with serve(agent) as server, httpx.AsyncClient() as client:
        body = run_input("hello")
        async with client.stream("POST", f"{server.url}/agui", json=body) as first:
            async for frame in read_sse(first):
                if frame.type == "TEXT_MESSAGE_CONTENT":
                    break
        again = await client.post(f"{server.url}/agui", json=body)

    assert again.status_code == 409
    assert "already live" in again.json()["detail"]


async def test_deleting_a_chat_cancels_its_live_run_first(serve: Serve) -> None:
    agent = GatedAgent()
    async with serve(agent) as server, httpx.AsyncClient() as client:
        body = run_input("hello")
        frames: list[Frame] = []
        async with client.stream("POST", f"{server.url}/agui", json=body) as response:
            async for frame in read_sse(response):
                if frame.data is not None:
                    frames.append(frame)
                if frame.type == "TEXT_MESSAGE_CONTENT" and len(frames) == 5:
                    chat = (await client.get(f"{server.url}/api/chats")).json()["items"][0]
                    deleted = await client.delete(f"{server.url}/api/chats/{chat['chat_uuid']}")
        remaining = (await client.get(f"{server.url}/api/chats")).json()["items"]

    assert deleted.status_code == 204
    assert frames[-1].type == "RUN_ERROR"
    assert remaining == []


async def test_every_backend_serves_runs_history_and_connect(store_url: str) -> None:
    app = create_app(store_url, agent=DemoAgent(delay=0))
    body = run_input("what is 5 * 5")
    async with LiveServer(app) as server, httpx.AsyncClient() as client:
        frames = await _post_run(client, server, body)
        second = run_input("and 6 * 6?", thread_id=body["threadId"], history=body["messages"])
        await _post_run(client, server, second)
        chats = (await client.get(f"{server.url}/api/chats")).json()["items"]
        url = f"{server.url}/agui/threads/{body['threadId']}/connect"
        async with client.stream("GET", url) as response:
            connected = await collect_sse(response)

    assert frames[-1].type == "RUN_FINISHED"
    assert len(chats) == 1
    assert "6 * 6 = 36" in chats[0]["last_message"]["content"]
    snapshot = connected[1].data["messages"] if connected[1].data else []
    assert [m["content"] for m in snapshot if m["role"] == "user"] == [
        "what is 5 * 5",
        "and 6 * 6?",
    ]
    assert connected[2].data is not None and connected[2].data["snapshot"]["turns"] == 2


async def test_a_resume_with_snapshots_replays_a_just_finished_run_whole(serve: Serve) -> None:
    async with serve(DemoAgent(delay=0)) as server, httpx.AsyncClient() as client:
        body = run_input("what is 2 + 2")
        run = await _post_run(client, server, body)
        url = f"{server.url}/agui/threads/{body['threadId']}/runs/{body['runId']}/events"
        async with client.stream("GET", url, params={"snapshots": "true"}) as response:
            frames = await collect_sse(response)
        both = await client.get(url, params={"snapshots": "true", "after": 2})
        elsewhere = url.replace(body["runId"], "no-such-run")
        unknown = await client.get(elsewhere, params={"snapshots": "true"})

    assert [f.type for f in frames[:3]] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
    # The run's events, all of them with their ids, after the snapshots.
    assert [(f.id, f.data) for f in frames[:1] + frames[3:]] == [(f.id, f.data) for f in run]
    snapshot = frames[1].data["messages"] if frames[1].data else []
    assert [(m["role"], m.get("content"), m.get("toolCalls")) for m in snapshot] == [
        ("user", "what is 2 + 2", None),
        ("reasoning", "", None),
        ("assistant", "", None),
        ("assistant", "", None),
    ]
    assert_valid_agui(_events(frames))
    assert both.status_code == 422
    assert "either after or snapshots=true" in both.json()["detail"]
    assert unknown.status_code == 404
