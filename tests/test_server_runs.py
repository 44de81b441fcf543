"""POST /agui runs each run id once and one run per thread at a time, in one process or many."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import BaseEvent, RunAgentInput

from server_support import Frame, GatedAgent, LiveServer, collect_sse, read_sse, run_input
from test_crash_recovery import WAIT_LIMIT
from test_server_processes import (
    Replica,
    open_gate,
    start_replica,
    start_run,
    stop_replica,
)
from threadstore import RunStatus, open_store
from threadstore.server import LOCAL_USER_UUID, DemoAgent, create_app

# A user of server_process.py's token table that no test of test_server_processes.py takes
# (those count up from 0), so the two modules' runs never meet.
ALICE = {"Authorization": "Bearer token-alice-99"}


class CountingAgent:
    """The demo agent, counting how often it ran."""

    def __init__(self) -> None:
        self.demo = DemoAgent(delay=0)
        self.runs = 0

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Count the run, then play the demo."""
        self.runs += 1
        async for event in self.demo.run(input):
            yield event


async def _contents(url: str, thread_id: str = "t1") -> list[str]:
    """The contents of the local user's messages on ``thread_id``, oldest first."""
    store = await open_store(url, setup=False)
    try:
        chat = await store.get_chat_by_thread_id(LOCAL_USER_UUID, thread_id)
        assert chat is not None
        return [m.content for m in await store.get_chat_messages(chat.chat_uuid)]
    finally:
        await store.close()


@pytest.mark.parametrize("retention", [60.0, 0.0], ids=["retained", "forgotten"])
async def test_re_posting_a_finished_run_replays_nothing_and_runs_nothing(
    tmp_path: Path, retention: float
) -> None:
    url = f"sqlite:///{tmp_path / 'threadstore.db'}"
    agent = CountingAgent()
    body = run_input("what is 2 + 3", thread_id="t1", run_id="r1")
    app = create_app(url, agent=agent, retention=retention, sweep_interval=None)
    async with LiveServer(app) as server, httpx.AsyncClient(base_url=server.url) as client:
        first = await client.post("/agui", json=body)
        first_events = await collect_sse(first)
        again = await client.post("/agui", json=body)
        replay = await client.get("/agui/threads/t1/runs/r1/events")

    contents = await _contents(url)
    assert first_events[-1].type == "RUN_FINISHED"
    assert agent.runs == 1
    assert again.status_code == 409
    answer = again.json()
    assert answer["code"] == "run_exists"
    assert "r1 of thread t1 already ran (complete)" in answer["detail"]
    assert answer["events_url"] == "/agui/threads/t1/runs/r1/events"
    assert answer["status"] == "complete"
    if retention:
        assert replay.status_code == 200
        assert [f.data for f in await collect_sse(replay)] == [f.data for f in first_events]
    else:
        assert answer["messages_url"].startswith("/api/chats/")
    assert sum("2 + 3 = 5" in c for c in contents) == 1  # one answer, not two


async def test_a_thread_with_a_live_run_refuses_a_second_one_until_it_ends(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'threadstore.db'}"
    agent = GatedAgent()
    first = run_input("one", thread_id="t1", run_id="r1")
    app = create_app(url, agent=agent, sweep_interval=None)
    async with LiveServer(app) as server, httpx.AsyncClient(base_url=server.url) as client:
        async with client.stream("POST", "/agui", json=first) as stream:
            await agent.wait_reached()
            second = run_input("two", thread_id="t1", run_id="r2", history=first["messages"])
            async with client.stream("POST", "/agui", json=second) as refused:
                if refused.status_code != 200:  # a run's stream would wait for the gate
                    await refused.aread()
            other = run_input("three", thread_id="t2")
            async with client.stream("POST", "/agui", json=other) as other_thread:
                pass  # its status is all this needs; the run goes on without its reader
            agent.gate.set()
            await collect_sse(stream)
        accepted = await client.post("/agui", json=second)
        accepted_events = await collect_sse(accepted)

    assert refused.status_code == 409
    answer = refused.json()
    assert answer["code"] == "run_live"
    assert answer["run_id"] == "r1"
    assert answer["events_url"] == "/agui/threads/t1/runs/r1/events"
    assert "t1 already has a live run, r1" in answer["detail"]
    assert other_thread.status_code == 200
    assert accepted_events[-1].type == "RUN_FINISHED"
    assert await _contents(url) == [
        "one",
        "first half second half",
        "two",
        "first half second half",
    ]


@pytest.mark.slow
async def test_runs_are_serialized_per_thread_across_server_processes(server_db_url: str) -> None:
    a = await start_replica(server_db_url)
    try:
        b = await start_replica(server_db_url)
        try:
            outcome = await _two_processes_one_thread(a, b)
        finally:
            await stop_replica(b)
    finally:
        await stop_replica(a)

    live_other, live_same, ran_again, accepted = outcome
    assert (live_other["code"], live_other["run_id"]) == ("run_live", "r1")
    assert (live_same["code"], live_same["run_id"]) == ("run_live", "r1")
    assert (ran_again["code"], ran_again["status"]) == ("run_exists", "complete")
    assert accepted == "RUN_FINISHED"


async def _two_processes_one_thread(
    a: Replica, b: Replica
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], str]:
    first = run_input("one", thread_id="t1", run_id="r1")
    second = run_input("two", thread_id="t1", run_id="r2", history=first["messages"])
    async with httpx.AsyncClient(timeout=WAIT_LIMIT) as client:
        await start_run(client, a, first, ALICE)  # r1 stays live on a, at its gate
        live_other = await client.post(f"{b.url}/agui", json=second, headers=ALICE)
        live_same = await client.post(f"{b.url}/agui", json=first, headers=ALICE)
        await open_gate(client, a, "r1")
        rest = await client.get(f"{a.url}/agui/threads/t1/runs/r1/events", headers=ALICE)
        assert (await collect_sse(rest))[-1].type == "RUN_FINISHED"
        ran_again = await client.post(f"{b.url}/agui", json=first, headers=ALICE)
        accepted = client.stream("POST", f"{b.url}/agui", json=second, headers=ALICE)
        async with accepted as response:
            assert response.status_code == 200
            await open_gate(client, b, "r2")
            last = (await collect_sse(response))[-1].type or ""
    for refused in (live_other, live_same, ran_again):
        assert refused.status_code == 409, refused.text
    return live_other.json(), live_same.json(), ran_again.json(), last


@pytest.mark.slow
async def test_stopping_the_server_ends_live_streams_with_shutdown(server_db_url: str) -> None:
    replica = await start_replica(server_db_url)
    body = run_input("one", thread_id="t1", run_id="r1")
    frames: list[Frame] = []
    try:
        async with (
            httpx.AsyncClient(timeout=WAIT_LIMIT) as client,
            client.stream("POST", f"{replica.url}/agui", json=body, headers=ALICE) as response,
        ):
            async for frame in read_sse(response):
                if frame.data is None:
                    continue
                frames.append(frame)
                if frame.type == "TEXT_MESSAGE_CONTENT" and len(frames) == 5:
                    replica.process.send_signal(signal.SIGTERM)  # the run waits at its gate
    finally:
        output = await stop_replica(replica)

    store = await open_store(server_db_url, setup=False)
    try:
        [chat] = await store.get_all_chats()
        run = await store.get_run(chat.chat_uuid, "r1")
        messages = await store.get_chat_messages(chat.chat_uuid)
    finally:
        await store.close()
    last = frames[-1].data or {}
    assert (last.get("type"), last.get("code")) == ("RUN_ERROR", "SHUTDOWN")
    assert "shutting down" in last["message"]
    assert run is not None and run.status == RunStatus.INTERRUPTED
    assert [(m.content, m.status) for m in messages][-1] == ("first half ", "interrupted")
    # The stream ended by itself: uvicorn never had to cut it at its timeout.
    assert "timeout graceful shutdown exceeded" not in output
    assert "Traceback" not in output
