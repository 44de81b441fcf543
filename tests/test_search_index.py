"""The search index of the SQL backends: messages stored before it existed are indexed in
the background after the migration, and PostgreSQL's language is the store's option."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

import threadstore
from postgres_support import fresh_database, server_url
from threadstore import ChatCreate, MessageCreate, MessageToolCallCreate, Store
from threadstore.errors import ConfigurationError
from threadstore.models import RetentionPolicy, Role, utcnow
from threadstore.store import _postgres_schema, _sqlite_executor, _sqlite_schema
from threadstore.store._postgres_search import PostgresSearch
from threadstore.store._sqlite_search import SQLiteSearch

pytestmark = pytest.mark.asyncio


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A database with no schema yet, of each SQL backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
    else:
        async with fresh_database(server_url()) as url:
            yield url


async def _fill(store: Store, user: uuid.UUID, chats: int) -> list[uuid.UUID]:
    made = []
    for n in range(chats):
        chat = await store.create_chat(ChatCreate(user_uuid=user, thread_id=f"t{n}"))
        message = await store.create_message(
            MessageCreate(chat_uuid=chat.chat_uuid, content=f"old harbour note {n}", role=Role.USER)
        )
        await store.create_message_tool_call(
            MessageToolCallCreate(
                message_uuid=message.message_uuid, tool_call_id="c", name="tide", arguments="{}"
            )
        )
        made.append(message.message_uuid)
    return made


async def _no_search(self: object) -> None:
    """A store of the version before search starts no indexing."""


async def _finish_indexing(store: Store) -> None:
    assert store._search is not None
    await asyncio.wait_for(store._search.wait_indexed(), 60)


async def test_messages_stored_before_search_are_indexed_in_the_background(
    empty_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The schema as it was before search: the migrations before search's own.
    sqlite_all, postgres_all = _sqlite_schema.MIGRATIONS, _postgres_schema.MIGRATIONS
    sqlite_search = next(n for n, sql in enumerate(sqlite_all) if "search_index" in sql)
    postgres_search = next(n for n, sql in enumerate(postgres_all) if "search_docs" in sql)
    monkeypatch.setattr(_sqlite_executor, "MIGRATIONS", sqlite_all[:sqlite_search])
    monkeypatch.setattr(_postgres_schema, "MIGRATIONS", postgres_all[:postgres_search])
    for backend in (SQLiteSearch, PostgresSearch):
        monkeypatch.setattr(backend, "start", _no_search)
    user = uuid.uuid4()
    async with await threadstore.open_store(empty_url) as old:
        made = await _fill(old, user, 45)
    monkeypatch.undo()  # this version: every migration, search started

    async with await threadstore.open_store(empty_url) as store:
        # setup() returned at once; the backlog is indexed after it, a batch at a time.
        assert store._search._indexing is not None  # type: ignore[union-attr]
        late = await store.create_chat(ChatCreate(user_uuid=user, thread_id="late"))
        await store.create_message(
            MessageCreate(chat_uuid=late.chat_uuid, content="new harbour", role=Role.USER)
        )
        await _finish_indexing(store)
        assert await store.messages.search_backlog() == 0
        found, cursor = [], None
        while True:
            page = await store.search(user, "harbour", limit=100, cursor=cursor)
            found += [hit.message_uuid for hit in page.items]
            if (cursor := page.next_cursor) is None:
                break
        assert len(found) == len(made) + 1
        assert set(made) < set(found)
        assert len((await store.search(user, "tide")).items) == 20


@pytest.mark.postgres
async def test_postgres_search_language_is_the_stores_option() -> None:
    async with fresh_database(server_url()) as url:
        user = uuid.uuid4()
        async with await threadstore.open_store(url) as simple:
            chat = await simple.create_chat(ChatCreate(user_uuid=user, thread_id="t"))
            await simple.create_message(
                MessageCreate(chat_uuid=chat.chat_uuid, content="The runners were running")
            )
            assert (await simple.search(user, "run")).items == []
            assert len((await simple.search(user, "the")).items) == 1

        async with await threadstore.open_store(url, search_language="english") as english:
            await _finish_indexing(english)
            assert len((await english.search(user, "run")).items) == 1
            # Stop words only: nothing to look for, so nothing is found (never all).
            assert (await english.search(user, "the")).items == []

        with pytest.raises(ConfigurationError):
            await threadstore.open_store(url, search_language="klingon")


ENTRIES = {
    "sqlite": "SELECT count(*) FROM search_index",
    "postgres": "SELECT count(*) FROM search_docs",
}


@pytest.mark.parametrize("how", ["delete", "sweep", "forget"])
async def test_index_entries_go_with_the_messages(store: Store, how: str) -> None:
    """Deleted, expired and erased messages leave no entry (their text) in the index."""
    kind = type(store).__name__
    if kind == "MemoryStore":
        pytest.skip("the memory store keeps no index")
    user = uuid.uuid4()
    gone = await store.create_chat(ChatCreate(user_uuid=user, thread_id="gone"))
    kept = await store.create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="kept"))
    for chat in (gone, kept):
        await _fill_chat(store, chat.chat_uuid)
    await _finish_indexing(store)
    before = await _entries(store)
    if how == "delete":
        await store.delete_chat(gone.chat_uuid)
    elif how == "sweep":
        await store.chats.set_retention_policy(RetentionPolicy(idle_ttl=60), user_uuid=user)
        await store.chats.sweep_expired(now=utcnow() + timedelta(hours=1))
    else:
        await store.chats.forget_user(user)
    assert await _entries(store) == before - 3
    assert (await store.search(user, "secret")).items == []


async def _fill_chat(store: Store, chat_uuid: uuid.UUID) -> None:
    for n in range(3):
        message = await store.create_message(
            MessageCreate(chat_uuid=chat_uuid, content=f"secret {n}", role=Role.USER)
        )
        await store.create_message_tool_call(
            MessageToolCallCreate(
                message_uuid=message.message_uuid, tool_call_id="c", name="vault", arguments="{}"
            )
        )


async def _entries(store: Store) -> int:
    if type(store).__name__ == "SQLiteStore":
        rows = await store.executor.read(ENTRIES["sqlite"], ())  # type: ignore[attr-defined]
    else:
        rows = await store._fetch(ENTRIES["postgres"])  # type: ignore[attr-defined]
    return int(rows[0][0])
