"""How the server answers while its store is away: each request's status and time.

A live server (uvicorn in a thread, the demo agent) runs on PostgreSQL through a TCP
proxy (``tests/chaos_proxy.py``) that cuts the connection (closes it, refuses new ones)
or stalls it (forwards nothing), and on a SQLite file whose write lock another process
holds (``BEGIN EXCLUSIVE``). During each outage the same requests go out at once:
``GET /api/chats``, ``GET .../messages``, ``PATCH`` (rename), ``POST /agui`` and
``GET /readyz``; then the store comes back and a full run goes through. The same
scenarios are tests (``tests/test_store_outage.py``); this prints their figures.

Run ``python benchmarks/bench_outage.py`` (``--timeout`` the store timeout, 5 s by
default; ``--url`` or ``THREADSTORE_TEST_POSTGRES_URL`` names a PostgreSQL server the run
may create a database on, dropped afterwards). Figures: docs/reliability.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from chaos_proxy import ChaosProxy
from common import machine_line
from server_support import LiveServer, collect_sse, run_input
from threadstore.server import create_app

Row = tuple[str, str, int, str, str, float]
"""scenario, request, status, content type, Retry-After, milliseconds."""


@asynccontextmanager
async def served(url: str, timeout: float) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(url, agent="demo", demo_delay=0, sweep_interval=None, store_timeout=timeout)
    async with (
        LiveServer(app) as server,
        httpx.AsyncClient(base_url=server.url, timeout=60) as client,
    ):
        yield client


async def first_chat(client: httpx.AsyncClient) -> tuple[str, str]:
    body = run_input()
    async with client.stream("POST", "/agui", json=body) as response:
        await collect_sse(response)
    chat = (await client.get("/api/chats")).json()["items"][0]
    return body["threadId"], chat["chat_uuid"]


async def timed(scenario: str, name: str, call: Callable[[], Awaitable[httpx.Response]]) -> Row:
    started = time.perf_counter()
    response = await call()
    elapsed = (time.perf_counter() - started) * 1000
    kind = response.headers.get("content-type", "").split(";")[0]
    retry = response.headers.get("retry-after", "")
    return scenario, name, response.status_code, kind, retry, elapsed


async def while_away(client: httpx.AsyncClient, scenario: str, chat: str) -> list[Row]:
    """Every request at once, as clients would send them during the outage."""
    calls: dict[str, Callable[[], Awaitable[httpx.Response]]] = {
        "GET /api/chats": lambda: client.get("/api/chats"),
        "GET /api/chats/{id}/messages": lambda: client.get(f"/api/chats/{chat}/messages"),
        "PATCH /api/chats/{id}": lambda: client.patch(f"/api/chats/{chat}", json={"name": "x"}),
        "POST /agui": lambda: client.post("/agui", json=run_input("Still there?")),
        "GET /readyz": lambda: client.get("/readyz"),
    }
    return list(await asyncio.gather(*(timed(scenario, n, c) for n, c in calls.items())))


async def back(client: httpx.AsyncClient, scenario: str, thread_id: str) -> list[Row]:
    """Once the store is back: readiness, then a whole run on the same thread."""

    async def run() -> httpx.Response:
        async with client.stream(
            "POST", "/agui", json=run_input("And now?", thread_id=thread_id)
        ) as response:
            await collect_sse(response)
        return response

    return [
        await timed(scenario, "GET /readyz (store back)", lambda: client.get("/readyz")),
        await timed(scenario, "POST /agui, whole run (store back)", run),
    ]


def through(url: str, port: int) -> str:
    parts = urlsplit(url)
    user = "".join(parts.netloc.rpartition("@")[:2])
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


@asynccontextmanager
async def new_database(server: str) -> AsyncIterator[str]:
    """A new, empty database on ``server``; dropped afterwards."""
    name = f"ts_outage_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')  # a generated name
    finally:
        await admin.close()
    try:
        yield urlunsplit(urlsplit(server)._replace(path=f"/{name}"))
    finally:
        admin = await asyncpg.connect(server)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


async def postgres(server: str, timeout: float) -> list[Row]:
    async with new_database(server) as url:
        return await postgres_on(url, timeout)


async def postgres_on(url: str, timeout: float) -> list[Row]:
    rows: list[Row] = []
    parts = urlsplit(url)
    for scenario in ("PostgreSQL cut", "PostgreSQL stall"):
        async with ChaosProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
            async with served(through(url, proxy.port), timeout) as client:
                thread_id, chat = await first_chat(client)
                if scenario.endswith("cut"):
                    await proxy.cut()
                else:
                    proxy.stall()
                rows += await while_away(client, scenario, chat)
                await proxy.restore()
                rows += await back(client, scenario, thread_id)
    return rows


async def sqlite(timeout: float) -> list[Row]:
    scenario = "SQLite write-locked"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "threadstore.db"
        async with served(f"sqlite:///{path}", timeout) as client:
            thread_id, chat = await first_chat(client)
            script = (
                "import sqlite3, sys\n"
                f"c = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
                "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); sys.stdin.read()\n"
            )
            child = subprocess.Popen(
                [sys.executable, "-c", script],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert child.stdin is not None and child.stdout is not None
            await asyncio.to_thread(child.stdout.readline)
            rows = await while_away(client, scenario, chat)
            child.stdin.close()
            await asyncio.to_thread(child.wait)
            child.stdout.close()
            rows += await back(client, scenario, thread_id)
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timeout", type=float, default=5.0, help="store timeout, seconds")
    parser.add_argument("--url", default=os.environ.get("THREADSTORE_TEST_POSTGRES_URL"))
    args = parser.parse_args()
    rows = await sqlite(args.timeout)
    if args.url:
        rows = await postgres(args.url, args.timeout) + rows
    print(machine_line())
    print(f"store timeout {args.timeout:g} s\n")
    print("| scenario | request | status | body | Retry-After | ms |")
    print("|---|---|---|---|---|---|")
    for scenario, name, status, kind, retry, ms in rows:
        print(f"| {scenario} | {name} | {status} | {kind} | {retry or '-'} | {ms:,.0f} |")


if __name__ == "__main__":
    asyncio.run(main())
