"""Two real server processes on one PostgreSQL database act on each other's runs.

A run started through one process is resumed, cancelled and connected to through
the other, and no user reaches another user's run through either of them.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from ag_ui_validate.pytest_plugin import assert_valid_agui

from postgres_support import clean_database, server_url
from server_support import Frame, collect_sse, read_sse, run_input
from test_crash_recovery import WAIT_LIMIT

SERVER = Path(__file__).with_name("server_process.py")

# The tests share two server processes (starting them is most of the module's time);
# each test has users of its own, so what one test leaves behind is no other's business.
pytestmark = [pytest.mark.postgres, pytest.mark.asyncio(loop_scope="module")]

_users = itertools.count()


@dataclass
class People:
    """Two users' auth headers, new for each test."""

    alice: dict[str, str]
    bob: dict[str, str]


@pytest.fixture
def people() -> People:
    n = next(_users)
    return People(
        alice={"Authorization": f"Bearer token-alice-{n}"},
        bob={"Authorization": f"Bearer token-bob-{n}"},
    )


@dataclass
class Replica:
    """One server process: its URL and the process itself."""

    url: str
    process: asyncio.subprocess.Process


async def start_replica(store_url: str, *args: str) -> Replica:
    """Start ``server_process.py`` on ``store_url`` (and ``args``); return once it answers."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SERVER),
        store_url,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,  # its log, for stop_replica's answer
        # The tests' own PYTHONPATH too: the child runs the threadstore under test.
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(SERVER.parent), os.environ.get("PYTHONPATH")) if p
            ),
        },
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), WAIT_LIMIT)
    assert line.startswith(b"port "), line
    url = f"http://127.0.0.1:{int(line.split()[1])}"
    async with httpx.AsyncClient() as client, asyncio.timeout(WAIT_LIMIT):
        while True:
            try:
                if (await client.get(f"{url}/healthz")).status_code == 200:
                    return Replica(url, process)
            except httpx.TransportError:
                pass  # not listening yet: the app's start-up runs first
            await asyncio.sleep(0.05)


async def stop_replica(replica: Replica) -> str:
    """Shut the process down gracefully (SIGTERM), or kill it if it hangs; return its output."""
    process = replica.process
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), WAIT_LIMIT)
        except TimeoutError:
            process.kill()
            await process.wait()
    assert process.stdout is not None
    return (await process.stdout.read()).decode(errors="replace")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def replicas() -> AsyncIterator[tuple[Replica, Replica]]:
    """Two server processes on one empty database, shared by the module's tests."""
    server = server_url()
    async with clean_database(server) as url:
        first = await start_replica(url)
        try:
            second = await start_replica(url)
            try:
                yield first, second
            finally:
                await stop_replica(second)
        finally:
            await stop_replica(first)


async def start_run(
    client: httpx.AsyncClient, replica: Replica, body: dict[str, Any], headers: dict[str, str]
) -> list[Frame]:
    """POST a run; read its frames up to the gate (the first half), then disconnect."""
    frames: list[Frame] = []
    url = f"{replica.url}/agui"
    async with client.stream("POST", url, json=body, headers=headers) as response:
        assert response.status_code == 200
        async for frame in read_sse(response):
            if frame.data is not None:
                frames.append(frame)
            if frame.type == "TEXT_MESSAGE_CONTENT" and len(frames) == 5:
                break
    return frames


async def open_gate(client: httpx.AsyncClient, replica: Replica, run_id: str) -> None:
    response = await client.post(f"{replica.url}/test/gates/{run_id}")
    assert response.status_code == 200


def run_path(body: dict[str, Any]) -> str:
    return f"/agui/threads/{body['threadId']}/runs/{body['runId']}"


async def messages_of(
    client: httpx.AsyncClient, replica: Replica, headers: dict[str, str]
) -> list[dict[str, Any]]:
    chats = (await client.get(f"{replica.url}/api/chats", headers=headers)).json()["items"]
    url = f"{replica.url}/api/chats/{chats[0]['chat_uuid']}/messages"
    items: list[dict[str, Any]] = (await client.get(url, headers=headers)).json()["items"]
    return items


async def test_a_run_started_on_one_process_is_resumed_through_the_other(
    replicas: tuple[Replica, Replica],
    people: People,
) -> None:
    a, b = replicas
    alice = people.alice
    body = run_input("hello")
    async with httpx.AsyncClient(timeout=WAIT_LIMIT) as client:
        before = await start_run(client, a, body, alice)
        events = f"{b.url}{run_path(body)}/events"
        headers = {**alice, "Last-Event-ID": str(before[-1].id)}
        async with client.stream("GET", events, headers=headers) as resumed:
            assert resumed.status_code == 200
            await open_gate(client, a, body["runId"])
            after = await collect_sse(resumed)
        replays = {}
        for replica in (a, b):
            url = f"{replica.url}{run_path(body)}/events"
            async with client.stream("GET", url, params={"after": 0}, headers=alice) as replay:
                replays[replica.url] = await collect_sse(replay)
        late = await client.get(events, headers={**alice, "Last-Event-ID": str(after[-1].id)})

    everything = replays[a.url]
    assert [f.id for f in before + after] == list(range(1, len(everything) + 1))
    assert [(f.id, f.data) for f in before + after] == [(f.id, f.data) for f in everything]
    assert [(f.id, f.data) for f in replays[b.url]] == [(f.id, f.data) for f in everything]
    assert after[-1].type == "RUN_FINISHED"
    assert_valid_agui([f.data for f in everything])
    # Resuming after the end, through the other process, is an empty stream, not an error.
    assert late.status_code == 200 and late.text == ""


async def test_a_run_started_on_one_process_is_cancelled_through_the_other(
    replicas: tuple[Replica, Replica],
    people: People,
) -> None:
    a, b = replicas
    alice = people.alice
    body = run_input("hello")
    async with httpx.AsyncClient(timeout=WAIT_LIMIT) as client:
        await start_run(client, a, body, alice)
        follow = f"{a.url}{run_path(body)}/events"
        async with client.stream("GET", follow, params={"after": 0}, headers=alice) as stream:
            cancel = await client.post(f"{b.url}{run_path(body)}/cancel", headers=alice)
            frames = await collect_sse(stream)
        again = await client.post(f"{b.url}{run_path(body)}/cancel", headers=alice)
        messages = await messages_of(client, b, alice)

    assert cancel.status_code == 200
    assert cancel.json() == {
        "thread_id": body["threadId"],
        "run_id": body["runId"],
        "cancelled": True,
        "status": "interrupted",
    }
    assert again.json()["cancelled"] is False
    assert again.json()["status"] == "interrupted"
    assert frames[-1].type == "RUN_ERROR"
    assert frames[-1].data is not None and frames[-1].data["code"] == "CANCELLED"
    assert [(m["role"], m["status"]) for m in messages] == [
        ("user", "complete"),
        ("assistant", "interrupted"),
    ]
    assert messages[-1]["content"] == "first half "


@pytest.mark.parametrize(
    "route",
    [
        pytest.param("connect", id="connect"),
        pytest.param("runs/{run}/events?snapshots=true", id="resume-with-snapshots"),
    ],
)
async def test_connect_and_a_resume_with_snapshots_through_the_other_process_show_the_live_run(
    replicas: tuple[Replica, Replica], route: str, people: People
) -> None:
    a, b = replicas
    alice = people.alice
    first = run_input("first question")
    async with httpx.AsyncClient(timeout=WAIT_LIMIT) as client:
        await start_run(client, a, first, alice)
        await open_gate(client, a, first["runId"])
        url = f"{a.url}{run_path(first)}/events"
        async with client.stream("GET", url, params={"after": 0}, headers=alice) as done:
            await collect_sse(done)  # the first run has ended
        second = run_input(
            "second question", thread_id=first["threadId"], history=first["messages"]
        )
        await start_run(client, a, second, alice)
        connect = f"{b.url}/agui/threads/{first['threadId']}/{route.format(run=second['runId'])}"
        frames: list[Frame] = []
        async with client.stream("GET", connect, headers=alice) as connected:
            assert connected.status_code == 200
            async for frame in read_sse(connected):
                if frame.data is None:
                    continue
                frames.append(frame)
                if frame.type == "STATE_SNAPSHOT" and frame.id is None:
                    await open_gate(client, a, second["runId"])

    types = [frame.type for frame in frames]
    assert types[:3] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
    assert frames[0].id == 1
    assert frames[0].data is not None and frames[0].data["runId"] == second["runId"]
    snapshot = frames[1].data["messages"] if frames[1].data else []
    assert [(m["role"], m["content"]) for m in snapshot if m["content"]] == [
        ("user", "first question"),
        ("assistant", "first half second half"),
        ("user", "second question"),
    ]
    # The live run's answer comes from its events; the snapshot names it, empty, if the
    # relayed events read for it had reached the answer's start.
    assert [(m["role"], m["content"]) for m in snapshot if not m["content"]] in (
        [],
        [("assistant", "")],
    )
    live_ids = [f.id for f in frames[3:] if f.id is not None]
    assert live_ids == list(range(2, 2 + len(live_ids)))
    text = "".join(f.data["delta"] for f in frames if f.data is not None and "delta" in f.data)
    assert text == "first half second half"
    assert types[-1] == "RUN_FINISHED"
    assert_valid_agui([f.data for f in frames])


async def test_no_process_lets_a_user_reach_another_users_run(
    replicas: tuple[Replica, Replica],
    people: People,
) -> None:
    a, b = replicas
    alice, bob = people.alice, people.bob
    alice_body = run_input("alice's secret question", thread_id="shared-thread", run_id="r1")
    bob_body = run_input("bob's question", thread_id="shared-thread", run_id="r1")
    path = run_path(alice_body)
    async with httpx.AsyncClient(timeout=WAIT_LIMIT) as client:
        await start_run(client, a, alice_body, alice)
        answers: list[int] = []
        leaked: list[str] = []
        for replica in (a, b):
            for method, route in (
                ("GET", f"{path}/events"),
                ("POST", f"{path}/cancel"),
                ("GET", "/agui/threads/shared-thread/connect"),
            ):
                response = await client.request(method, f"{replica.url}{route}", headers=bob)
                answers.append(response.status_code)
                if "secret" in response.text or "first half" in response.text:
                    leaked.append(f"{replica.url} {method} {route}")
        # Bob's own run with the very same ids, through the other process, is his alone.
        bob_frames = await start_run(client, b, bob_body, bob)
        await open_gate(client, b, "r1")
        url = f"{b.url}{path}/events"
        async with client.stream("GET", url, params={"after": 0}, headers=bob) as response:
            bob_frames = await collect_sse(response)  # bob's run has ended
        connected: list[list[Frame]] = []
        for replica in (a, b):
            url = f"{replica.url}/agui/threads/shared-thread/connect"
            async with client.stream("GET", url, headers=bob) as response:
                connected.append(await collect_sse(response))
        resumed: dict[str, list[Frame]] = {}
        for who, replica, headers in (("bob", a, bob), ("alice", b, alice)):
            url = f"{replica.url}{path}/events"
            after = {"Last-Event-ID": "5"}
            async with client.stream("GET", url, headers={**headers, **after}) as response:
                assert response.status_code == 200
                if who == "alice":
                    await open_gate(client, a, "r1")
                resumed[who] = await collect_sse(response)
        bob_messages = await messages_of(client, a, bob)
        alice_messages = await messages_of(client, b, alice)

    assert leaked == []
    assert answers == [404] * 6
    assert bob_frames[0].data is not None and bob_frames[0].data["runId"] == "r1"
    assert resumed["bob"][-1].type == resumed["alice"][-1].type == "RUN_FINISHED"
    assert [m["content"] for m in bob_messages] == ["bob's question", "first half second half"]
    assert [m["content"] for m in alice_messages] == [
        "alice's secret question",
        "first half second half",
    ]
    assert all(m["status"] == "complete" for m in bob_messages + alice_messages)
    # Alice's run is live on the thread id they share, yet bob's connect sees only his own.
    for frames in connected:
        assert [f.type for f in frames] == [
            "RUN_STARTED",
            "MESSAGES_SNAPSHOT",
            "STATE_SNAPSHOT",
            "RUN_FINISHED",
        ]
        assert frames[0].data is not None and frames[0].data["runId"].startswith("connect-")
        snapshot = frames[1].data["messages"] if frames[1].data else []
        assert [m.get("content") for m in snapshot] == ["bob's question", "first half second half"]


async def test_starting_a_run_live_on_the_other_process_is_a_conflict(
    replicas: tuple[Replica, Replica],
    people: People,
) -> None:
    a, b = replicas
    alice = people.alice
    body = run_input("hello")
    async with httpx.AsyncClient(timeout=WAIT_LIMIT) as client:
        await start_run(client, a, body, alice)
        again = await client.post(f"{b.url}/agui", json=body, headers=alice)
        await open_gate(client, a, body["runId"])

    assert again.status_code == 409
    assert "already live" in again.json()["detail"]


async def test_deleting_a_chat_through_the_other_process_stops_its_live_run_first(
    replicas: tuple[Replica, Replica],
    people: People,
) -> None:
    a, b = replicas
    alice = people.alice
    body = run_input("hello")
    async with httpx.AsyncClient(timeout=WAIT_LIMIT) as client:
        await start_run(client, a, body, alice)
        chat = (await client.get(f"{b.url}/api/chats", headers=alice)).json()["items"][0]
        follow = f"{a.url}{run_path(body)}/events"
        async with client.stream("GET", follow, params={"after": 0}, headers=alice) as stream:
            deleted = await client.delete(f"{b.url}/api/chats/{chat['chat_uuid']}", headers=alice)
            frames = await collect_sse(stream)
        remaining = (await client.get(f"{a.url}/api/chats", headers=alice)).json()["items"]

    assert deleted.status_code == 204
    assert frames[-1].data is not None and frames[-1].data["code"] == "CANCELLED"
    assert remaining == []
