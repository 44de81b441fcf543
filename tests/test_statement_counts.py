"""The SQLite backend sends a bounded number of SQL statements per call.

Statements are counted with the connection's trace hook, on a real database file.
SQLite also fires that hook when a trigger's body starts, and Python reports the
firing with the text of the statement that set the trigger off; consecutive repeats
of one text are therefore one client statement (what the store sent), and that is
what these tests count. Counts, not times: a read that issued one query per chat or
per message would show here on any machine.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from uuid import UUID, uuid4

import pytest

from sqlite_support import counting_hops, sqlite_store
from threadstore import (
    ChatCreate,
    MessageCreate,
    MessageReasoningCreate,
    MessageStatus,
    MessageToolCallCreate,
    MessageUpdate,
    Role,
)
from threadstore.store import Write
from threadstore.store.ops import CreateMessage, CreateToolCall, UpdateMessage
from threadstore.store.sqlite import SQLiteStore

CHATS_PER_USER = 10


class StatementLog:
    """Client statements seen through the store's trace hook."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def __call__(self, sql: str) -> None:
        if not self.statements or self.statements[-1] != sql:
            self.statements.append(sql)


async def count_statements(store: SQLiteStore, action: Callable[[], Awaitable[object]]) -> int:
    """Return how many statements awaiting ``action()`` sends to the database."""
    log = StatementLog()
    await store.set_trace_callback(log)
    try:
        await action()
    finally:
        await store.set_trace_callback(None)
    return len(log.statements)


async def add_turn(store: SQLiteStore, chat_uuid: UUID, content: str) -> None:
    """Append an assistant message that made one tool call after one reasoning step."""
    message = await store.create_message(
        MessageCreate(chat_uuid=chat_uuid, role=Role.ASSISTANT, content=content)
    )
    await store.create_message_reasoning(
        MessageReasoningCreate(message_uuid=message.message_uuid, content="thinking")
    )
    await store.create_message_tool_call(
        MessageToolCallCreate(message_uuid=message.message_uuid, tool_call_id="call", name="f")
    )


@dataclass(frozen=True)
class Catalog:
    """A database file holding many users' chats, each ending in a tool-calling turn."""

    path: Path
    users: list[UUID]
    chats: list[UUID]


async def fill_catalog(path: Path, chats: int) -> Catalog:
    """Store ``chats`` chats, ten per user, through the public API in one transaction."""
    users = [uuid4() for _ in range(chats // CHATS_PER_USER)]
    chat_ids: list[UUID] = []
    async with sqlite_store(path) as store:
        async with store.transaction():
            for index in range(chats):
                chat = await store.create_chat(
                    ChatCreate(user_uuid=users[index % len(users)], thread_id=f"thread-{index}")
                )
                await add_turn(store, chat.chat_uuid, f"answer {index}")
                chat_ids.append(chat.chat_uuid)
        # Index the messages for search now: a store opened on the file later would, in
        # the background, while a test counts its statements.
        assert store._search is not None
        await store._search.wait_indexed()
    return Catalog(path, users, chat_ids)


@pytest.fixture(autouse=True)
def _counted_alone(quiet_search_indexer: None) -> None:
    """Every test here counts statements: the search indexer stays out of them."""


@pytest.fixture(scope="module")
def catalogs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Catalog]:
    """A small (200 chats) and a large (2,000 chats) database, built once for this module."""
    folder = tmp_path_factory.mktemp("catalogs")
    return {size: asyncio.run(fill_catalog(folder / f"{size}.db", size)) for size in (200, 2000)}


async def test_listing_a_users_chats_is_one_statement_with_200_or_2000_chats_stored(
    catalogs: dict[int, Catalog],
) -> None:
    counts: dict[int, int] = {}
    for size, catalog in catalogs.items():
        async with sqlite_store(catalog.path) as store:
            user = catalog.users[-1]
            page = await store.chats.list_chats(user)
            assert len(page.items) == CHATS_PER_USER
            assert {chat.user_uuid for chat in page.items} == {user}
            counts[size] = await count_statements(store, partial(store.chats.list_chats, user))

    assert counts[200] == counts[2000] == 1


async def test_last_messages_of_100_chats_take_three_statements_with_200_or_2000_chats_stored(
    catalogs: dict[int, Catalog],
) -> None:
    counts: dict[int, int] = {}
    for size, catalog in catalogs.items():
        chosen = catalog.chats[-100:]
        async with sqlite_store(catalog.path) as store:
            last = await store.get_last_messages(chosen)
            assert set(last) == set(chosen)
            assert all(len(m.tool_calls) == 1 and len(m.reasonings) == 1 for m in last.values())
            counts[size] = await count_statements(store, partial(store.get_last_messages, chosen))

    # The newest messages, then their tool calls, then their reasoning steps.
    assert counts[200] == counts[2000] == 3


async def test_appending_a_message_is_one_statement_however_long_the_chat(tmp_path: Path) -> None:
    async with sqlite_store(tmp_path / "append.db") as store:
        chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
        counts: list[int] = []
        for index in range(50):
            message = MessageCreate(
                chat_uuid=chat.chat_uuid,
                role=Role.USER if index % 2 == 0 else Role.ASSISTANT,
                content=f"message {index}",
                agui_id=f"msg-{index}",
                status=MessageStatus.COMPLETE,
                in_progress=False,
            )
            counts.append(await count_statements(store, partial(store.create_message, message)))
        history = await store.get_chat_messages(chat.chat_uuid)

    assert counts == [1] * 50
    # The one statement also moved the chat's active leaf: each message follows the last.
    assert [m.parent_uuid for m in history[1:]] == [m.message_uuid for m in history[:-1]]


async def test_an_append_writes_its_message_row_once_and_its_chat_row_once(
    tmp_path: Path,
) -> None:
    # The message's insert stamps its own chat_version; the trigger then moves the chat's
    # leaf and version, and records the message as pending for the search index (its
    # entry is written later, in a batch). A second write of the new row would cost
    # every append.
    def total_changes(conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT total_changes()").fetchone()[0])

    # inline=off: every write runs on the thread's connection, whose counter this reads.
    async with sqlite_store(tmp_path / "rows.db", "?inline=off") as store:
        chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
        written = []
        for index in range(3):
            before = await store.executor.thread.call(total_changes)
            await store.create_message(
                MessageCreate(chat_uuid=chat.chat_uuid, content=f"message {index}")
            )
            written.append(await store.executor.thread.call(total_changes) - before)
        view = await store.messages.read_history(chat.chat_uuid)
        stamped = await store.executor.thread.call(
            lambda conn: conn.execute("SELECT chat_version FROM messages ORDER BY seq").fetchall()
        )
        version = await store.executor.thread.call(
            lambda conn: conn.execute("SELECT version FROM chats").fetchone()[0]
        )

    assert written == [3, 3, 3]  # the message, its chat, its search_pending row
    assert len(view) == 3
    # Each row holds the chat's version right after its append; the last, the chat's own.
    assert [row[0] for row in stamped] == sorted({row[0] for row in stamped})
    assert stamped[-1][0] == version


async def test_loading_a_history_takes_the_same_statements_for_3_or_300_turns(
    tmp_path: Path,
) -> None:
    counts: dict[int, int] = {}
    async with sqlite_store(tmp_path / "history.db") as store:
        for turns in (3, 300):
            chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id=f"{turns}"))
            async with store.transaction():
                for index in range(turns):
                    await add_turn(store, chat.chat_uuid, f"answer {index}")
            history = await store.get_chat_messages(chat.chat_uuid)
            assert [m.content for m in history] == [f"answer {i}" for i in range(turns)]
            assert all(len(m.tool_calls) == 1 and len(m.reasonings) == 1 for m in history)
            counts[turns] = await count_statements(
                store, partial(store.get_chat_messages, chat.chat_uuid)
            )

    assert counts[3] == counts[300] <= 4


async def test_a_batch_of_writes_is_one_hop_to_the_database_thread(tmp_path: Path) -> None:
    async with sqlite_store(tmp_path / "batch.db") as store:
        chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
        with counting_hops(store) as hops:
            await store.apply_writes(turns_of_writes(chat.chat_uuid, 20))
        statements = await count_statements(
            store, partial(store.apply_writes, turns_of_writes(chat.chat_uuid, 20))
        )
        history = await store.get_chat_messages(chat.chat_uuid)

    # The whole batch in one call to the database thread: BEGIN, 60 writes, COMMIT.
    assert (hops, statements) == ([1], 62)
    assert len(history) == 40 and all(len(m.tool_calls) == 1 for m in history)


def turns_of_writes(chat_uuid: UUID, turns: int) -> list[Write]:
    """Per turn: create a message, create its tool call, update the message's content."""
    writes: list[Write] = []
    for index in range(turns):
        message_uuid = uuid4()
        create = MessageCreate(chat_uuid=chat_uuid, message_uuid=message_uuid, role=Role.ASSISTANT)
        call = MessageToolCallCreate(message_uuid=message_uuid, tool_call_id="c", name="f")
        writes += [
            CreateMessage(create),
            CreateToolCall(call),
            UpdateMessage(message_uuid, MessageUpdate(content=f"answer {index}")),
        ]
    return writes
