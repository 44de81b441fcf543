"""Shared fixtures: one ``store`` fixture parametrized over every backend.

``memory``, ``sqlite`` and ``sqlite-thread`` (SQLite with inline calls off) always
run. ``postgres`` runs when ``THREADSTORE_TEST_POSTGRES_URL`` names a server the tests
may create databases on; each test then gets a fresh database that is dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID

import pytest

import threadstore
from threadstore import Chat, ChatCreate, Message, MessageCreate, Store

POSTGRES_URL_ENV = "THREADSTORE_TEST_POSTGRES_URL"

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("sqlite", id="sqlite"),
    # Every statement through aiosqlite's thread, none inline on the event loop.
    pytest.param("sqlite-thread", id="sqlite-thread"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


def _with_database(url: str, database: str) -> str:
    """Return ``url`` pointing at ``database`` instead of the one it names."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


@asynccontextmanager
async def _postgres_database(server_url: str) -> AsyncIterator[str]:
    """Create a throwaway database on ``server_url``; yield its URL; drop it afterwards."""
    import asyncpg

    name = f"ts_test_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(server_url)
    try:
        # Identifiers cannot be bound as parameters; ``name`` is generated above.
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield _with_database(server_url, name)
    finally:
        admin = await asyncpg.connect(server_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@pytest.fixture(params=BACKENDS)
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The URL of an empty store of each backend kind."""
    backend: str = request.param
    if backend == "memory":
        yield "memory://"
    elif backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'threadstore.db'}"
    elif backend == "sqlite-thread":
        yield f"sqlite:///{tmp_path / 'threadstore.db'}?inline=off"
    else:
        server_url = os.environ.get(POSTGRES_URL_ENV)
        if not server_url:
            pytest.skip(f"{POSTGRES_URL_ENV} is not set; PostgreSQL contract tests need a server")
        async with _postgres_database(server_url) as url:
            yield url


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """An open, migrated, empty store; closed after the test."""
    opened = await threadstore.open_store(store_url)
    try:
        yield opened
    finally:
        await opened.close()


class StoreOpener(Protocol):
    """Opens another store on the test's database, e.g. with custom model classes."""

    def __call__(self, **options: Any) -> Awaitable[Store]: ...


@pytest.fixture
async def open_test_store(store_url: str) -> AsyncIterator[StoreOpener]:
    """Open extra stores on the test's database (``memory://`` gives a new, empty one).

    Pass ``chat_model=``, ``message_model=``, ``tool_call_model=`` or
    ``reasoning_model=`` to open it with subclassed models. Every store opened
    here is closed after the test.
    """
    opened: list[Store] = []

    async def open_one(**options: Any) -> Store:
        new = await threadstore.open_store(store_url, **options)
        opened.append(new)
        return new

    try:
        yield open_one
    finally:
        for each in reversed(opened):
            await each.close()


MakeChat = Callable[..., Awaitable[Chat]]
AddMessage = Callable[..., Awaitable[Message]]


@pytest.fixture
def make_chat(store: Store) -> MakeChat:
    """Create a chat in ``store``; a fresh user and thread unless given."""

    async def make(
        user_uuid: UUID | None = None, thread_id: str | None = None, **fields: Any
    ) -> Chat:
        return await store.create_chat(
            ChatCreate(
                user_uuid=user_uuid or uuid.uuid4(),
                thread_id=thread_id or f"thread-{uuid.uuid4().hex[:8]}",
                **fields,
            )
        )

    return make


@pytest.fixture
def add_message(store: Store) -> AddMessage:
    """Append a message to a chat in ``store`` (on its active branch unless a parent is given)."""

    async def add(chat: Chat | UUID, content: str = "", **fields: Any) -> Message:
        chat_uuid = chat.chat_uuid if isinstance(chat, Chat) else chat
        return await store.create_message(
            MessageCreate(chat_uuid=chat_uuid, content=content, **fields)
        )

    return add


REQUIRE_POSTGRES_ENV = "THREADSTORE_REQUIRE_POSTGRES"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """In CI (``THREADSTORE_REQUIRE_POSTGRES=1``) a skipped PostgreSQL test is a failure."""
    outcome = yield
    report = outcome.get_result()
    if (
        os.environ.get(REQUIRE_POSTGRES_ENV) == "1"
        and report.skipped
        and item.get_closest_marker("postgres") is not None
    ):
        report.outcome = "failed"
        report.longrepr = (
            f"PostgreSQL test skipped although {REQUIRE_POSTGRES_ENV}=1: {report.longrepr}"
        )


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ]
)
async def server_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh, migrated database on each backend a server process runs on (SQLite, PostgreSQL)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'threadstore.db'}"
    else:
        server_url = os.environ.get(POSTGRES_URL_ENV)
        if not server_url:
            pytest.skip(f"{POSTGRES_URL_ENV} is not set; PostgreSQL tests need a server")
        async with _postgres_database(server_url) as url:
            # Migrated before any server starts, so several can start on it at once.
            await (await threadstore.open_store(url)).close()
            yield url
        return
    await (await threadstore.open_store(url)).close()
    yield url
