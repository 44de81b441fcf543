"""Two real server processes on one SQLite file: runs are never doubled, lost or misreported.

SQLite has no relay between processes, so a process cannot stop another's run; what
each one can do is read the run records the other writes, and say the truth about them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from server_support import collect_sse, run_input
from test_crash_recovery import WAIT_LIMIT
from test_server_processes import (
    Replica,
    open_gate,
    run_path,
    start_replica,
    start_run,
    stop_replica,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

_users = itertools.count()


def alice() -> dict[str, str]:
    """The auth header of a user of this test alone."""
    return {"Authorization": f"Bearer token-alice-{next(_users)}"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def replicas(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Replica, ...]]:
    """Two server processes on one SQLite file, shared by the module's tests."""
    url = f"sqlite:///{tmp_path_factory.mktemp('shared') / 'threadstore.db'}"
    first = await start_replica(url)
    try:
        second = await start_replica(url)
        try:
            yield first, second
        finally:
            await stop_replica(second)
    finally:
        await stop_replica(first)


async def test_the_same_run_cannot_start_on_the_other_process_while_it_is_live(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    user = alice()
    body = run_input("hello")
    async with httpx.AsyncClient(timeout=WAIT_LIMIT) as client:
        await start_run(client, a, body, user)
        # Streamed: a second run that did start would wait at its gate for good.
        async with client.stream("POST", f"{b.url}/agui", json=body, headers=user) as again:
            status = again.status_code
            answer = (await again.aread()).decode() if status != 200 else ""
        for replica in (a, b):
            await open_gate(client, replica, body["runId"])

    # The server's run gate answers before the run manager's own check would.
    assert status == 409
    assert "already live" in answer and body["runId"] in answer


async def test_deleting_the_chat_on_the_other_process_ends_the_stream_with_a_run_error(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    user = alice()
    body = run_input("hello")
    async with httpx.AsyncClient(timeout=WAIT_LIMIT) as client:
        await start_run(client, a, body, user)
        chat = (await client.get(f"{b.url}/api/chats", headers=user)).json()["items"][0]
        follow = f"{a.url}{run_path(body)}/events"
        async with client.stream("GET", follow, params={"after": 0}, headers=user) as stream:
            deleted = await client.delete(f"{b.url}/api/chats/{chat['chat_uuid']}", headers=user)
            await open_gate(client, a, body["runId"])
            frames = await collect_sse(stream)
        remaining = (await client.get(f"{a.url}/api/chats", headers=user)).json()["items"]

    assert deleted.status_code == 204
    types = [frame.type for frame in frames]
    assert "RUN_FINISHED" not in types
    last = frames[-1].data
    assert last is not None and last["type"] == "RUN_ERROR"
    assert last["code"] == "CHAT_DELETED"
    assert "chat was deleted" in last["message"]
    assert remaining == []


def record_as_a_library_owner(path: Path, run_id: str) -> None:
    """Rewrite the run's owner as a library's manager records it (``host:pid:hex``, no pid
    namespace): one a server cannot judge gone, so only its heartbeat speaks for it."""
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        (owner,) = conn.execute("SELECT owner FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        assert "@" in owner  # a server's own owner: tests/test_dead_owners.py settles those
        library_owner = owner.partition("@")[0]
        conn.execute("UPDATE runs SET owner = ? WHERE run_id = ?", (library_owner, run_id))


async def test_cancel_of_a_killed_run_whose_owner_cannot_be_judged_says_when_the_sweep_takes_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "threadstore.db"
    url = f"sqlite:///{path}"
    # A short heartbeat (both judge freshness by it), so the killed one's goes stale soon.
    a = await start_replica(url, "0.2")
    b = await start_replica(url, "0.2")
    user = alice()
    body = run_input("hello")
    cancel = f"{b.url}{run_path(body)}/cancel"
    try:
        async with httpx.AsyncClient(timeout=WAIT_LIMIT) as client:
            await start_run(client, a, body, user)
            a.process.kill()
            await a.process.wait()
            record_as_a_library_owner(path, body["runId"])
            async with asyncio.timeout(WAIT_LIMIT):
                while True:  # until the killed process's last beat is stale
                    answer = await client.post(cancel, headers=user)
                    if "stopped heartbeating" in answer.text:
                        break
                    assert answer.status_code == 409, answer.text
                    await asyncio.sleep(0.1)
    finally:
        await stop_replica(b)
        await stop_replica(a)

    assert answer.status_code == 409
    detail = answer.json()["detail"]
    assert "not live" in detail
    assert "cancel it there" not in detail
    assert "next server start or `threadstore sweep`" in detail
