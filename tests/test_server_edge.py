"""The server's edge, over real HTTP: identity headers, CORS, content types, hostile ids."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from server_support import LiveServer, run_input
from threadstore import Store, open_store
from threadstore.server import DemoAgent, HeaderAuth, create_app


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[Store]:
    store = await open_store(f"sqlite:///{tmp_path / 'threadstore.db'}")
    try:
        yield store
    finally:
        await store.close()


async def test_a_repeated_identity_header_is_refused(sqlite_store: Store) -> None:
    app = create_app(sqlite_store, agent=DemoAgent(delay=0), auth=HeaderAuth("X-User-Id"))
    async with LiveServer(app) as server, httpx.AsyncClient(base_url=server.url) as client:
        # A proxy that appends its header after the client's own copy.
        twice = await client.get(
            "/api/chats", headers=[("X-User-Id", "mallory"), ("X-User-Id", "alice")]
        )
        run = await client.post(
            "/agui",
            json=run_input("hi"),
            headers=[("X-User-Id", "mallory"), ("X-User-Id", "alice")],
        )
        once = await client.get("/api/chats", headers={"X-User-Id": "alice"})

    assert twice.status_code == 401
    assert "X-User-Id header appears 2 times" in twice.json()["detail"]
    assert run.status_code == 401
    assert once.status_code == 200
    assert await sqlite_store.get_all_chats() == []


async def test_cors_is_off_by_default_and_allows_the_configured_origins(
    sqlite_store: Store,
) -> None:
    preflight = {
        "Origin": "https://app.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    closed = create_app(sqlite_store, agent=DemoAgent(delay=0))
    async with LiveServer(closed) as server, httpx.AsyncClient(base_url=server.url) as client:
        off = await client.options("/agui", headers=preflight)
    opened = create_app(
        sqlite_store, agent=DemoAgent(delay=0), cors_origins=["https://app.example"]
    )
    async with LiveServer(opened) as server, httpx.AsyncClient(base_url=server.url) as client:
        allowed = await client.options("/agui", headers=preflight)
        other = await client.options("/agui", headers={**preflight, "Origin": "https://evil"})
        listed = await client.get("/api/chats", headers={"Origin": "https://app.example"})

    assert off.status_code == 405
    assert "access-control-allow-origin" not in off.headers
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "https://app.example"
    assert "POST" in allowed.headers["access-control-allow-methods"]
    assert other.status_code == 400
    assert "access-control-allow-origin" not in other.headers
    assert listed.headers["access-control-allow-origin"] == "https://app.example"
