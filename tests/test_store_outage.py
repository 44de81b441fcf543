"""While the store is away the server answers at once, in JSON, and recovers by itself.

A TCP proxy (``chaos_proxy.py``) sits between a live server and PostgreSQL and cuts
or stalls the connection; a child process holds a SQLite file's write lock. Every
request made meanwhile must be answered within the store's timeout plus one second
(the client gives up after that, and the test with it), as a ``503`` with code
``store_unavailable`` and a ``Retry-After`` header, never a plain-text 500; once the
store is back, the same server serves again, and nothing is stored twice.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

import threadstore
from chaos_proxy import ChaosProxy
from postgres_support import clean_database, server_url
from server_support import LiveServer, collect_sse, run_input
from threadstore.errors import ConfigurationError
from threadstore.server import create_app

STORE_TIMEOUT = 1.0
"""The server's store timeout in these tests: short, so an outage shows at once."""

ANSWER_WITHIN = STORE_TIMEOUT + 1.0
"""The bar: no request waits longer than the store timeout plus one second."""


def through(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")
    user = netloc[0] + netloc[1]
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


@asynccontextmanager
async def served(url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A live server of ``url`` with the demo agent, and a client that waits ANSWER_WITHIN."""
    app = create_app(
        url, agent="demo", demo_delay=0, sweep_interval=None, store_timeout=STORE_TIMEOUT
    )
    async with (
        LiveServer(app) as server,
        httpx.AsyncClient(base_url=server.url, timeout=ANSWER_WITHIN) as client,
    ):
        yield client


def assert_unavailable(response: httpx.Response) -> None:
    """A 503 in the documented JSON shape, with a Retry-After."""
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["code"] == "store_unavailable"
    assert "store is unavailable" in body["detail"]
    assert response.headers["retry-after"] == str(math.ceil(STORE_TIMEOUT))


async def run_to_end(client: httpx.AsyncClient, body: dict[str, Any]) -> list[str]:
    """POST /agui and return the event types of the whole stream."""
    async with client.stream("POST", "/agui", json=body) as response:
        assert response.status_code == 200, await response.aread()
        return [frame.type or "" for frame in await collect_sse(response)]


async def requests_while_away(client: httpx.AsyncClient, chat_uuid: str) -> None:
    """Every kind of request, at once, while the store is away: each answers 503 in time."""
    answers = await asyncio.gather(
        client.get("/api/chats"),
        client.get(f"/api/chats/{chat_uuid}/messages"),
        client.patch(f"/api/chats/{chat_uuid}", json={"name": "renamed while away"}),
        client.post("/agui", json=run_input("Are you there?")),
        client.get("/readyz"),
    )
    for response in answers:
        assert_unavailable(response)
    ready = answers[-1].json()
    assert ready["status"] == "unavailable" and ready["outbox_depth"] == 0
    assert (await client.get("/healthz")).json() == {"status": "ok"}  # alive all along


async def recovered(client: httpx.AsyncClient, thread_id: str, chat_uuid: str) -> None:
    """The same server serves again: reads, a second run on the thread, nothing twice."""
    assert (await client.get("/readyz")).json() == {"status": "ready", "outbox_depth": 0}
    listed = (await client.get("/api/chats")).json()["items"]
    assert [chat["thread_id"] for chat in listed] == [thread_id]
    events = await run_to_end(client, run_input("And now?", thread_id=thread_id))
    assert events[-1] == "RUN_FINISHED"
    messages = (await client.get(f"/api/chats/{chat_uuid}/messages")).json()["items"]
    ids = [message["message_uuid"] for message in messages]
    assert len(ids) == len(set(ids))
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert users == ["What is 12 * 7 + 3?", "And now?"]
    assert all(m["status"] == "complete" for m in messages)


@pytest.fixture
async def proxied_postgres() -> AsyncIterator[tuple[str, ChaosProxy]]:
    """A clean PostgreSQL database's URL through a chaos proxy, and the proxy."""
    async with clean_database(server_url()) as url:
        parts = urlsplit(url)
        async with ChaosProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
            yield through(url, proxy.port), proxy


async def first_chat(client: httpx.AsyncClient) -> tuple[str, str]:
    """Run once while the store is there; the run's thread id and chat uuid."""
    body = run_input()
    assert (await run_to_end(client, body))[-1] == "RUN_FINISHED"
    chat = (await client.get("/api/chats")).json()["items"][0]
    return body["threadId"], chat["chat_uuid"]


@pytest.mark.postgres
async def test_while_postgres_is_cut_every_request_answers_503_json_then_the_server_recovers(
    proxied_postgres: tuple[str, ChaosProxy],
) -> None:
    url, proxy = proxied_postgres
    async with served(url) as client:
        thread_id, chat_uuid = await first_chat(client)
        await proxy.cut()
        await requests_while_away(client, chat_uuid)
        await requests_while_away(client, chat_uuid)  # and again: no connection left over
        await proxy.restore()
        await recovered(client, thread_id, chat_uuid)


@pytest.mark.postgres
async def test_while_postgres_stalls_every_request_answers_503_json_then_the_server_recovers(
    proxied_postgres: tuple[str, ChaosProxy],
) -> None:
    url, proxy = proxied_postgres
    async with served(url) as client:
        thread_id, chat_uuid = await first_chat(client)
        proxy.stall()
        await requests_while_away(client, chat_uuid)
        await requests_while_away(client, chat_uuid)
        await proxy.restore()
        await recovered(client, thread_id, chat_uuid)


@asynccontextmanager
async def write_locked(path: Path) -> AsyncIterator[None]:
    """Another process holds the SQLite file's write lock (``BEGIN EXCLUSIVE``) meanwhile."""
    script = (
        "import sqlite3, sys\n"
        f"conn = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
        "conn.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "sys.stdin.read()\n"
        "conn.execute('ROLLBACK')\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert await asyncio.to_thread(child.stdout.readline) == "locked\n"
        yield
    finally:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.close()
        await asyncio.to_thread(child.wait)
        child.stdout.close()


async def test_while_another_process_holds_the_sqlite_write_lock_writes_answer_503_json(
    tmp_path: Path,
) -> None:
    path = tmp_path / "threadstore.db"
    async with served(f"sqlite:///{path}") as client:
        thread_id, chat_uuid = await first_chat(client)
        async with write_locked(path):
            writes = await asyncio.gather(
                client.patch(f"/api/chats/{chat_uuid}", json={"name": "renamed while locked"}),
                client.delete(f"/api/chats/{chat_uuid}"),
            )
            for response in writes:
                assert_unavailable(response)
            # Reads go on: WAL readers never wait for a writer.
            assert (await client.get("/api/chats")).status_code == 200
            assert (await client.get("/readyz")).json()["status"] == "ready"
        await recovered(client, thread_id, chat_uuid)
        chat = (await client.get(f"/api/chats/{chat_uuid}")).json()
        assert chat["name"] != "renamed while locked"


async def test_the_store_timeout_comes_from_the_keyword_else_the_url_else_five_seconds(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'threadstore.db'}"
    for opened, timeout in (
        (threadstore.open_store(url), 5.0),
        (threadstore.open_store(url + "?timeout=0.25&inline=off"), 0.25),
        (threadstore.open_store(url + "?timeout=0.25", timeout=2), 2.0),
    ):
        store = await opened
        await store.close()
        assert store.timeout == timeout
    for bad in (url + "?timeout=soon", url + "?timeout=0", url + "?timeout=nan"):
        with pytest.raises(ConfigurationError, match="timeout"):
            await threadstore.open_store(bad)


@pytest.mark.postgres
async def test_a_postgresql_url_keeps_its_timeout_to_itself() -> None:
    async with clean_database(server_url()) as url:
        store = await threadstore.open_store(url + "?timeout=0.5")
        try:
            assert store.timeout == 0.5
            assert await store.schema_version()  # the server was not sent a "timeout" setting
        finally:
            await store.close()


def test_a_driver_error_without_a_sqlite_code_is_kept_as_it_is() -> None:
    # Errors the sqlite3 module raises itself (a closed connection, a wrong call) carry no
    # SQLite code: they are neither "locked" nor lost behind an AttributeError.
    import sqlite3

    from threadstore.store._sqlite_executor import translate_error

    error = sqlite3.ProgrammingError("Cannot operate on a closed database.")
    assert translate_error(error) is error
