"""``GET /readyz``: ``503`` in the documented JSON shape whenever the server cannot serve.

An orchestrator routes traffic by it: a store that does not answer in time, one that is
unreachable, and one without its schema must each take the server out of rotation
(``status: unavailable``, with why), and so must a server still starting; a store that
answers again puts it back, without a restart.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from threadstore import Store, open_store
from threadstore.errors import MigrationError, StoreUnavailableError
from threadstore.server import create_app

TIMEOUT = 0.05
"""The store's timeout: short, as /readyz waits it (and a second's grace) for a store
that does not bound its own calls."""


@asynccontextmanager
async def client_of(store: str | Store, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a started app serving ``store``, through its ASGI interface."""
    app = create_app(store, agent="demo", demo_delay=0, sweep_interval=None, **options)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            yield http


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """A real SQLite file store with a short timeout, owned by the test."""
    opened = await open_store(f"sqlite:///{tmp_path / 'threadstore.db'}", timeout=TIMEOUT)
    try:
        yield opened
    finally:
        await opened.close()


def assert_not_ready(response: httpx.Response, code: str) -> dict[str, Any]:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code and body["status"] == "unavailable"
    assert body["outbox_depth"] == 0
    return body


async def test_a_store_that_never_answers_makes_readyz_answer_503_by_itself(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store that does not bound its own calls (a stuck driver): /readyz must not hang
    # with it, or the orchestrator's probe times out instead of reading why.
    stuck = asyncio.Event()
    answering = store.schema_version

    async def never() -> int:
        await stuck.wait()
        return await answering()

    monkeypatch.setattr(store, "schema_version", never)
    async with client_of(store) as client:
        response = await client.get("/readyz")
        body = assert_not_ready(response, "store_unavailable")
        assert f"did not answer within {TIMEOUT} s" in body["detail"]
        assert response.headers["retry-after"] == str(math.ceil(TIMEOUT))
        monkeypatch.setattr(store, "schema_version", answering)  # the store is back
        ready = await client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json() == {"status": "ready", "outbox_depth": 0}


async def test_an_unreachable_store_makes_readyz_answer_503_saying_so(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def away() -> int:
        raise StoreUnavailableError("the store is unavailable: connection refused", timeout=3)

    monkeypatch.setattr(store, "schema_version", away)
    async with client_of(store) as client:
        response = await client.get("/readyz")
        body = assert_not_ready(response, "store_unavailable")
        assert "connection refused" in body["detail"]
        assert response.headers["retry-after"] == "3"  # the store's own timeout
        assert (await client.get("/healthz")).json() == {"status": "ok"}  # alive all along


async def test_readyz_answers_503_starting_before_the_server_has_started(tmp_path: Path) -> None:
    app = create_app(f"sqlite:///{tmp_path / 'threadstore.db'}", agent="demo")
    transport = httpx.ASGITransport(app=app)  # no lifespan: nothing is open yet
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["code"] == "not_ready"
    assert response.json()["status"] == "starting"


async def test_a_store_whose_schema_is_wrong_makes_readyz_answer_503_schema_not_ready(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store that answers but refuses its schema (a store's own check, say): the server
    # cannot serve until it is migrated, and the probe says why.
    async def refused() -> int:
        raise MigrationError("database schema version 99 is newer than this threadstore")

    monkeypatch.setattr(store, "schema_version", refused)
    async with client_of(store) as client:
        response = await client.get("/readyz")
        body = assert_not_ready(response, "schema_not_ready")
        assert "newer than this threadstore" in body["detail"]
