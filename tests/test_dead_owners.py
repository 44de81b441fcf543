"""A server knows at once that a run's process is gone, not after the heartbeat window.

A server process is killed (``kill -9``) in the middle of a run, while the run's
heartbeat is still fresh. Another process on the same store, or the killed one
restarted, settles the run as interrupted at once: cancelling it answers
``{"cancelled": true}`` and stops it for good, posting its id again answers 409 with
an events URL that answers, and the thread takes a new run.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import threadstore
from postgres_support import clean_database, server_url
from server_support import collect_sse, run_input
from test_server_processes import Replica, run_path, start_replica, start_run, stop_replica
from threadstore.server import user_uuid_for

pytestmark = pytest.mark.slow

ALICE = {"Authorization": "Bearer token-alice-0"}


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ]
)
async def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A store several server processes share."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    async with clean_database(server_url()) as url:
        yield url


async def killed_mid_run(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    """Start a server, start a run on it, ``kill -9`` it mid-run; the run's input."""
    doomed = await start_replica(url)
    body = run_input()
    await start_run(client, doomed, body, ALICE)
    doomed.process.send_signal(signal.SIGKILL)
    await doomed.process.wait()  # reaped: its pid is gone
    await stop_replica(doomed)
    return body


async def run_status(url: str, body: dict[str, Any]) -> str:
    """The run's status as the store records it."""
    store = await threadstore.open_store(url, setup=False)
    try:
        chat = await store.get_chat_by_thread_id(user_uuid_for("alice-0"), body["threadId"])
        assert chat is not None
        run = await store.get_run(chat.chat_uuid, body["runId"])
        assert run is not None
        return str(run.status)
    finally:
        await store.close()


async def assert_settled_and_free(
    client: httpx.AsyncClient, replica: Replica, body: dict[str, Any]
) -> None:
    """Its id answers 409 with an events URL that answers; the thread runs a new run."""
    again = await client.post(f"{replica.url}/agui", json=body, headers=ALICE)
    assert again.status_code == 409
    refusal = again.json()
    assert refusal["code"] == "run_exists" and refusal["status"] == "interrupted"
    async with client.stream("GET", replica.url + refusal["events_url"], headers=ALICE) as replay:
        assert replay.status_code == 200
        frames = await collect_sse(replay)
    # It ends: from the relayed events (PostgreSQL), else replayed from the store as
    # RUN_STARTED, what was stored (the question at least), and the end its record gives.
    assert frames[-1].type == "RUN_ERROR"
    for snapshot in (f.data for f in frames if f.type == "MESSAGES_SNAPSHOT"):
        assert snapshot is not None
        assert [m["content"] for m in snapshot["messages"] if m["role"] == "user"] == [
            body["messages"][0]["content"]
        ]
    nxt = run_input("Again?", thread_id=body["threadId"])
    async with client.stream("POST", f"{replica.url}/agui", json=nxt, headers=ALICE) as response:
        assert response.status_code == 200
        started = await anext(aiter(response.aiter_lines()))
    assert started.startswith("id: 1")
    await client.post(f"{replica.url}/test/gates/{nxt['runId']}")


async def test_cancel_through_another_process_settles_a_killed_process_run_at_once(
    shared_url: str,
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        survivor = await start_replica(shared_url)
        try:
            body = await killed_mid_run(client, shared_url)
            cancel = f"{survivor.url}{run_path(body)}/cancel"
            first = await client.post(cancel, headers=ALICE)
            assert first.status_code == 200, first.text
            assert first.json()["cancelled"] is True
            assert first.json()["status"] == "interrupted"
            assert await run_status(shared_url, body) == "interrupted"
            second = await client.post(cancel, headers=ALICE)
            assert (second.json()["cancelled"], second.json()["status"]) == (False, "interrupted")
            await assert_settled_and_free(client, survivor, body)
        finally:
            await stop_replica(survivor)


async def test_a_restarted_server_settles_its_killed_run_at_start_up(shared_url: str) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        body = await killed_mid_run(client, shared_url)
        assert await run_status(shared_url, body) == "running"  # its heartbeat is fresh
        restarted = await start_replica(shared_url)
        try:
            assert await run_status(shared_url, body) == "interrupted"
            await assert_settled_and_free(client, restarted, body)
        finally:
            await stop_replica(restarted)
