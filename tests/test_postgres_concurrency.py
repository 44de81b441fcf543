"""PostgreSQL under real concurrency: parallel connections, several pools, several processes.

Each test gets an empty, migrated database (a new one where it tests the migrations).
The contract suite already runs on PostgreSQL; these tests add what only a shared server
can show: writers on different connections (and in different processes) racing on the
same rows.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import asyncpg
import pytest

import threadstore
from postgres_support import clean_database, fresh_database, server_url
from threadstore import (
    ChatCreate,
    InvalidInputError,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageReasoningUpdate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    NotFoundError,
    Run,
    RunStatus,
    ToolCall,
)
from threadstore.errors import MigrationError
from threadstore.models import TextPart
from threadstore.store._postgres_schema import MIGRATIONS
from threadstore.store.ops import UpdateMessage
from threadstore.store.postgres import FOREGROUND_CONNECTIONS, PostgresStore

pytestmark = pytest.mark.postgres

OpenStore = Callable[..., Awaitable[PostgresStore]]


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """The URL of an empty, migrated database for the test."""
    async with clean_database(server_url()) as url:
        yield url


@pytest.fixture
async def fresh_pg_url() -> AsyncIterator[str]:
    """The URL of a new database without the schema, dropped after the test."""
    async with fresh_database(server_url()) as url:
        yield url


@pytest.fixture
async def open_pg(pg_url: str) -> AsyncIterator[OpenStore]:
    """Open stores on the test's database, each with its own pool; closed after the test."""
    opened: list[PostgresStore] = []

    async def open_one(**options: Any) -> PostgresStore:
        store = await threadstore.open_store(pg_url, **options)
        assert isinstance(store, PostgresStore)
        opened.append(store)
        return store

    try:
        yield open_one
    finally:
        for store in reversed(opened):
            await store.close()


# --- several processes -------------------------------------------------------------------------

_CHILD = r"""
import asyncio, json, sys, uuid
import threadstore
from threadstore import ChatCreate

async def main(url, action, args):
    store = await threadstore.open_store(url, setup=False)
    try:
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        if action == "setup":
            await store.setup()
            result = await store.schema_version()
        else:
            chats = await asyncio.gather(*(
                store.create_chat(
                    ChatCreate(user_uuid=uuid.UUID(args["user"]), thread_id=args["thread"])
                )
                for _ in range(args["creates"])
            ))
            result = [str(chat.chat_uuid) for chat in chats]
        print(json.dumps(result), flush=True)
    finally:
        await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
"""


async def in_processes(url: str, count: int, action: str, args: dict[str, Any]) -> list[Any]:
    """Run ``action`` in ``count`` fresh interpreters, released at the same moment."""
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CHILD,
            url,
            action,
            json.dumps(args),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(count)
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            ready = await asyncio.wait_for(process.stdout.readline(), 60)
            assert ready == b"ready\n", ready
        for process in processes:  # every child is connected: release them together
            assert process.stdin is not None
            process.stdin.write(b"go\n")
        results = []
        for process in processes:
            out, err = await asyncio.wait_for(process.communicate(), 60)
            assert process.returncode == 0, err.decode()
            results.append(json.loads(out))
        return results
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def test_two_processes_creating_one_thread_at_once_get_one_chat(
    pg_url: str, open_pg: OpenStore
) -> None:
    store = await open_pg()
    user = uuid.uuid4()

    results = await in_processes(
        pg_url, 2, "create_chat", {"user": str(user), "thread": "same", "creates": 10}
    )

    created = {chat for result in results for chat in result}
    assert len(created) == 1
    assert [str(c.chat_uuid) for c in await store.get_all_chats(user)] == list(created)


async def test_setup_from_several_processes_at_once_migrates_once(fresh_pg_url: str) -> None:
    versions = await in_processes(fresh_pg_url, 3, "setup", {})

    assert versions == [len(MIGRATIONS)] * 3
    conn = await asyncpg.connect(fresh_pg_url)
    try:
        applied = await conn.fetch("SELECT version FROM threadstore_migrations ORDER BY version")
    finally:
        await conn.close()
    assert [row["version"] for row in applied] == list(range(1, len(MIGRATIONS) + 1))


# --- schema ------------------------------------------------------------------------------------


async def test_a_schema_newer_than_the_code_is_refused(fresh_pg_url: str) -> None:
    async with await threadstore.open_store(fresh_pg_url) as store:
        conn = await asyncpg.connect(fresh_pg_url)
        try:
            await conn.execute(
                "INSERT INTO threadstore_migrations (version, applied_at) VALUES ($1, now())",
                len(MIGRATIONS) + 1,
            )
        finally:
            await conn.close()

        with pytest.raises(MigrationError, match="newer"):
            await store.setup()


async def test_a_database_without_the_schema_asks_for_migration(fresh_pg_url: str) -> None:
    async with await threadstore.open_store(fresh_pg_url, setup=False) as store:
        assert isinstance(store, PostgresStore)
        assert await store.schema_version() == 0
        with pytest.raises(MigrationError, match="setup"):
            await store.chats.get_chat(uuid.uuid4())
        await store.setup()
        assert await store.schema_version() == len(MIGRATIONS)
        assert await store.chats.get_chat(uuid.uuid4()) is None


# --- pools and transactions --------------------------------------------------------------------


async def test_an_apps_own_pool_serves_the_store_and_stays_open(pg_url: str) -> None:
    pool = await asyncpg.create_pool(pg_url, min_size=1, max_size=1)
    try:
        store = await threadstore.open_store(pg_url, pool=pool)
        chat = await store.create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))
        await store.close()

        assert await pool.fetchval("SELECT count(*) FROM chats") == 1
        async with await threadstore.open_store(pg_url, pool=pool) as again:
            assert await again.chats.get_chat(chat.chat_uuid) == chat
    finally:
        await pool.close()


async def test_a_session_in_another_time_zone_reads_the_same_records(
    pg_url: str, open_pg: OpenStore
) -> None:
    store = await open_pg()
    chat = await store.create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="t", state=[1]))
    message = await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="a"))
    call = await store.create_message_tool_call(
        MessageToolCallCreate(message_uuid=message.message_uuid, tool_call_id="c", name="f")
    )
    pool = await asyncpg.create_pool(
        pg_url, min_size=1, max_size=2, server_settings={"TimeZone": "Asia/Kolkata"}
    )
    try:
        other = await threadstore.open_store(pg_url, pool=pool)

        assert await other.chats.get_chat(chat.chat_uuid) == await store.chats.get_chat(
            chat.chat_uuid
        )
        assert list(await other.get_all_chats(chat.user_uuid)) == list(
            await store.get_all_chats(chat.user_uuid)
        )
        (read,) = await other.get_chat_messages(chat.chat_uuid)
        assert read.tool_calls == [call]
        assert read.model_copy(update={"tool_calls": []}) == message
        await other.close()
    finally:
        await pool.close()


async def test_a_transaction_runs_every_call_of_its_task_on_its_one_connection(
    pg_url: str,
) -> None:
    # With a pool of one connection, a call that borrowed a second one would wait forever.
    pool = await asyncpg.create_pool(pg_url, min_size=1, max_size=1)
    try:
        store = await threadstore.open_store(pg_url, pool=pool)

        async def write_and_read() -> list[Message]:
            async with store.transaction():
                chat = await store.create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))
                await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="a"))
                async with store.transaction():
                    await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="b"))
                return list(await store.get_chat_messages(chat.chat_uuid))

        history = await asyncio.wait_for(write_and_read(), 10)

        assert [m.content for m in history] == ["a", "b"]
        await store.close()
    finally:
        await pool.close()


async def test_connections_the_server_drops_are_replaced(pg_url: str, open_pg: OpenStore) -> None:
    store = await open_pg()
    chat = await store.create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))
    await asyncio.gather(*(store.chats.get_chat(chat.chat_uuid) for _ in range(4)))  # several kept
    admin = await asyncpg.connect(pg_url)
    try:
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await admin.close()
    await asyncio.sleep(0.1)  # let the client see the sockets close

    for _ in range(3):
        assert await store.chats.get_chat(chat.chat_uuid) is not None


async def test_text_postgresql_cannot_hold_is_refused_as_invalid_input(
    open_pg: OpenStore,
) -> None:
    store = await open_pg()
    chat = await store.create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))

    with pytest.raises(InvalidInputError):
        await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="a\x00b"))

    kept = await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="ok"))
    assert [m.message_uuid for m in await store.get_chat_messages(chat.chat_uuid)] == [
        kept.message_uuid
    ]


# --- no lost update ----------------------------------------------------------------------------


class TaggedMessage(Message):
    """A message with two fields of its own (kept in the ``extra`` document)."""

    team: str = ""
    priority: int = 0


class TaggedMessageUpdate(MessageUpdate):
    """The update DTO matching :class:`TaggedMessage`."""

    team: str | None = None
    priority: int | None = None


class TracedToolCall(ToolCall):
    """A tool call with two fields of its own."""

    trace_id: str = ""
    attempt: int = 0


class TracedToolCallUpdate(MessageToolCallUpdate):
    """The update DTO matching :class:`TracedToolCall`."""

    trace_id: str | None = None
    attempt: int | None = None


def message_patches(round_: int) -> dict[str, TaggedMessageUpdate]:
    """One patch per field, each setting only its field to a value unique to the round."""
    return {
        "content": TaggedMessageUpdate(content=f"content {round_}"),
        "content_parts": TaggedMessageUpdate(content_parts=[TextPart(text=f"part {round_}")]),
        "name": TaggedMessageUpdate(name=f"name {round_}"),
        "encrypted_value": TaggedMessageUpdate(encrypted_value=f"secret {round_}"),
        "activity_content": TaggedMessageUpdate(activity_content={"round": round_}),
        "status": TaggedMessageUpdate(status=list(MessageStatus)[round_ % 4]),
        "in_progress": TaggedMessageUpdate(in_progress=round_ % 2 == 0),
        "step_name": TaggedMessageUpdate(step_name=f"step {round_}"),
        "metadata": TaggedMessageUpdate(metadata={"round": round_}),
        "team": TaggedMessageUpdate(team=f"team {round_}"),
        "priority": TaggedMessageUpdate(priority=round_),
    }


async def test_concurrent_patches_of_one_message_from_many_connections_lose_no_field(
    open_pg: OpenStore,
) -> None:
    stores = [await open_pg(message_model=TaggedMessage) for _ in range(3)]
    chat = await stores[0].create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))
    message = await stores[0].create_message(MessageCreate(chat_uuid=chat.chat_uuid))

    for round_ in range(1, 11):
        patches = message_patches(round_)
        await asyncio.gather(
            *(
                stores[index % len(stores)].update_message(message.message_uuid, patch)
                for index, patch in enumerate(patches.values())
            )
        )

        stored = await stores[round_ % len(stores)].get_message(message.message_uuid)
        assert isinstance(stored, TaggedMessage)
        for field, patch in patches.items():
            assert getattr(stored, field) == getattr(patch, field), (round_, field)


def tool_call_patches(round_: int) -> dict[str, TracedToolCallUpdate]:
    """One patch per tool-call field, each setting only its field."""
    return {
        "name": TracedToolCallUpdate(name=f"tool {round_}"),
        "arguments": TracedToolCallUpdate(arguments=json.dumps({"round": round_})),
        "content": TracedToolCallUpdate(content=f"result {round_}"),
        "result_message_id": TracedToolCallUpdate(result_message_id=f"r{round_}"),
        "error": TracedToolCallUpdate(error=f"error {round_}"),
        "status": TracedToolCallUpdate(status=list(MessageStatus)[round_ % 4]),
        "in_progress": TracedToolCallUpdate(in_progress=round_ % 2 == 0),
        "step_name": TracedToolCallUpdate(step_name=f"step {round_}"),
        "metadata": TracedToolCallUpdate(metadata={"round": round_}),
        "trace_id": TracedToolCallUpdate(trace_id=f"trace {round_}"),
        "attempt": TracedToolCallUpdate(attempt=round_),
    }


async def test_concurrent_patches_of_one_tool_call_from_many_connections_lose_no_field(
    open_pg: OpenStore,
) -> None:
    stores = [await open_pg(tool_call_model=TracedToolCall) for _ in range(3)]
    chat = await stores[0].create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))
    message = await stores[0].create_message(MessageCreate(chat_uuid=chat.chat_uuid))
    call = await stores[0].create_message_tool_call(
        MessageToolCallCreate(message_uuid=message.message_uuid, tool_call_id="c", name="f")
    )

    for round_ in range(1, 11):
        patches = tool_call_patches(round_)
        await asyncio.gather(
            *(
                stores[index % len(stores)].update_message_tool_call(call.uuid, patch)
                for index, patch in enumerate(patches.values())
            )
        )

        stored = await stores[round_ % len(stores)].get_tool_call_by_agui_id(
            message.message_uuid, "c"
        )
        assert isinstance(stored, TracedToolCall)
        for field, patch in patches.items():
            assert getattr(stored, field) == getattr(patch, field), (round_, field)


async def test_concurrent_renames_end_with_one_of_the_names_and_none_fails(
    open_pg: OpenStore,
) -> None:
    stores = [await open_pg() for _ in range(3)]
    chat = await stores[0].create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))
    names = [f"name {i}" for i in range(30)]

    renamed = await asyncio.gather(
        *(stores[i % 3].update_chat_name(chat.chat_uuid, name) for i, name in enumerate(names))
    )

    assert [c.name if c else None for c in renamed] == names  # each saw its own rename
    final = await stores[0].chats.get_chat(chat.chat_uuid)
    assert final is not None and final.name in names
    assert final.thread_id == chat.thread_id


# --- appends and runs --------------------------------------------------------------------------


async def test_appends_and_tool_calls_from_several_pools_stay_ordered(
    open_pg: OpenStore,
) -> None:
    stores = [await open_pg() for _ in range(3)]
    chat = await stores[0].create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))

    created = await asyncio.gather(
        *(
            stores[i % 3].create_message(MessageCreate(chat_uuid=chat.chat_uuid, content=str(i)))
            for i in range(30)
        )
    )
    last = max(created, key=lambda m: m.seq)
    calls = await asyncio.gather(
        *(
            stores[i % 3].create_message_tool_call(
                MessageToolCallCreate(
                    message_uuid=last.message_uuid, tool_call_id=f"c{i}", name="f"
                )
            )
            for i in range(30)
        )
    )

    history = await stores[1].get_chat_messages(chat.chat_uuid)
    assert {m.message_uuid for m in history} == {m.message_uuid for m in created}
    assert history[0].parent_uuid is None
    assert all(b.parent_uuid == a.message_uuid for a, b in itertools.pairwise(history))
    positions = [c.seq for c in history[-1].tool_calls]
    assert sorted(positions) == positions == sorted(c.seq for c in calls)
    assert len(set(positions)) == 30


async def run_turns(store: PostgresStore, chat_uuid: uuid.UUID, run_id: str, turns: int) -> None:
    """Write ``turns`` in-progress answers of one run, each with a tool call, one flush each."""
    for turn in range(turns):
        async with store.transaction():
            answer = await store.create_message(
                MessageCreate(chat_uuid=chat_uuid, run_id=run_id, content=f"{run_id}:{turn}")
            )
            await store.create_message_tool_call(
                MessageToolCallCreate(
                    message_uuid=answer.message_uuid, tool_call_id=f"{run_id}-{turn}", name="f"
                )
            )
            await store.update_message(answer.message_uuid, MessageUpdate(content=f"{turn}!"))
        await asyncio.sleep(0)


async def test_two_runs_on_one_chat_at_once_keep_their_own_records_and_statuses(
    open_pg: OpenStore,
) -> None:
    first, second = await open_pg(), await open_pg()
    chat = await first.create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))
    # One run continuing the chat's leaf at a time: r2 runs beside r1 as a regenerate does.
    for store, run_id in ((first, "r1"), (second, "r2")):
        exclusive = run_id == "r1"
        await store.start_run(
            Run(chat_uuid=chat.chat_uuid, thread_id="t", run_id=run_id, exclusive=exclusive)
        )

    await asyncio.gather(
        run_turns(first, chat.chat_uuid, "r1", 8), run_turns(second, chat.chat_uuid, "r2", 8)
    )
    # r1 is cancelled while r2 keeps writing; then r2 completes.
    interrupted, _ = await asyncio.gather(
        first.finalize_run_records(chat.chat_uuid, "r1", MessageStatus.INTERRUPTED),
        run_turns(second, chat.chat_uuid, "r2", 4),
    )
    await first.finish_run(chat.chat_uuid, "r1", RunStatus.INTERRUPTED)
    completed = await second.finalize_run_records(chat.chat_uuid, "r2", MessageStatus.COMPLETE)
    await second.finish_run(chat.chat_uuid, "r2", RunStatus.COMPLETE)

    assert (interrupted, completed) == (16, 24)  # each answer and its tool call
    history = await first.get_chat_messages(chat.chat_uuid)
    by_run: dict[str | None, list[Message]] = {"r1": [], "r2": []}
    for message in history:
        by_run[message.run_id].append(message)
    assert len(by_run["r1"]) == 8 and len(by_run["r2"]) == 12
    expected = {"r1": MessageStatus.INTERRUPTED, "r2": MessageStatus.COMPLETE}
    for run_id, messages in by_run.items():
        for message in messages:
            assert (message.status, message.in_progress) == (expected[run_id], False)
            assert [(t.status, t.in_progress) for t in message.tool_calls] == [
                (expected[run_id], False)
            ]
    runs = [await second.get_run(chat.chat_uuid, r) for r in ("r1", "r2")]
    assert [r.status if r else None for r in runs] == [RunStatus.INTERRUPTED, RunStatus.COMPLETE]


async def test_deleting_a_chat_while_connections_write_to_it_never_deadlocks(
    open_pg: OpenStore,
) -> None:
    stores = [await open_pg(), await open_pg()]
    chat = await stores[0].create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))
    messages = [
        await stores[0].create_message(
            MessageCreate(chat_uuid=chat.chat_uuid, content=str(i), run_id="r1")
        )
        for i in range(4)
    ]
    calls = [
        await stores[1].create_message_tool_call(
            MessageToolCallCreate(message_uuid=m.message_uuid, tool_call_id="c", name="f")
        )
        for m in messages
    ]
    deleted = asyncio.Event()

    async def writer(index: int) -> None:
        store, message, call = stores[index % 2], messages[index], calls[index]
        turn = 0
        while not deleted.is_set() or turn < 3:
            turn += 1
            try:
                async with store.transaction():
                    await store.update_message(
                        message.message_uuid, MessageUpdate(content=f"{turn}")
                    )
                    await store.create_message_tool_call(
                        MessageToolCallCreate(
                            message_uuid=message.message_uuid, tool_call_id=f"c{turn}", name="f"
                        )
                    )
                    await store.update_message_tool_call(
                        call.uuid, MessageToolCallUpdate(arguments=f"{turn}")
                    )
                    await store.create_message(
                        MessageCreate(chat_uuid=chat.chat_uuid, content="more", run_id="r1")
                    )
            except NotFoundError:
                pass  # the chat is gone: this flush finds nothing to write to
            await store.finalize_run_records(chat.chat_uuid, "r1", MessageStatus.COMPLETE)
            await asyncio.sleep(0)

    async def deleter() -> None:
        await asyncio.sleep(0.05)
        assert await stores[1].delete_chat(chat.chat_uuid) is not None
        deleted.set()

    await asyncio.wait_for(asyncio.gather(*(writer(i) for i in range(4)), deleter()), 60)

    assert await stores[0].chats.get_chat(chat.chat_uuid) is None
    assert list(await stores[1].get_chat_messages(chat.chat_uuid)) == []


# --- the history cache, across stores ----------------------------------------------------------

Write = Callable[[PostgresStore, uuid.UUID], Awaitable[object]]


async def last_message(store: PostgresStore, chat_uuid: uuid.UUID) -> Message:
    return (await store.get_chat_messages(chat_uuid))[-1]


async def append(store: PostgresStore, chat_uuid: uuid.UUID) -> object:
    return await store.create_message(MessageCreate(chat_uuid=chat_uuid, content="new"))


async def edit(store: PostgresStore, chat_uuid: uuid.UUID) -> object:
    last = await last_message(store, chat_uuid)
    return await store.update_message(last.message_uuid, MessageUpdate(content="edited"))


async def add_tool_call(store: PostgresStore, chat_uuid: uuid.UUID) -> object:
    last = await last_message(store, chat_uuid)
    return await store.create_message_tool_call(
        MessageToolCallCreate(message_uuid=last.message_uuid, tool_call_id="c2", name="g")
    )


async def answer_tool_call(store: PostgresStore, chat_uuid: uuid.UUID) -> object:
    last = await last_message(store, chat_uuid)
    return await store.update_message_tool_call(
        last.tool_calls[0].uuid, MessageToolCallUpdate(content="42")
    )


async def add_reasoning(store: PostgresStore, chat_uuid: uuid.UUID) -> object:
    last = await last_message(store, chat_uuid)
    return await store.create_message_reasoning(
        MessageReasoningCreate(message_uuid=last.message_uuid, content="hmm")
    )


async def edit_reasoning(store: PostgresStore, chat_uuid: uuid.UUID) -> object:
    last = await last_message(store, chat_uuid)
    return await store.update_message_reasoning(
        last.reasonings[0].uuid, MessageReasoningUpdate(content="aha")
    )


async def switch_branch(store: PostgresStore, chat_uuid: uuid.UUID) -> object:
    first = (await store.get_chat_messages(chat_uuid))[0]
    return await store.branches.set_active_leaf(chat_uuid, first.message_uuid)


async def finalize(store: PostgresStore, chat_uuid: uuid.UUID) -> object:
    return await store.finalize_run_records(chat_uuid, "r1", MessageStatus.INTERRUPTED)


async def delete(store: PostgresStore, chat_uuid: uuid.UUID) -> object:
    return await store.delete_chat(chat_uuid)


WRITES: dict[str, Write] = {
    "append": append,
    "edit": edit,
    "add_tool_call": add_tool_call,
    "answer_tool_call": answer_tool_call,
    "add_reasoning": add_reasoning,
    "edit_reasoning": edit_reasoning,
    "switch_branch": switch_branch,
    "finalize": finalize,
    "delete": delete,
}


def shape(messages: Sequence[Message]) -> list[Any]:
    """Everything a read shows of a history."""
    return [
        (
            m.message_uuid,
            m.content,
            m.status,
            [(t.tool_call_id, t.content, t.status) for t in m.tool_calls],
            [(r.content, r.status) for r in m.reasonings],
        )
        for m in messages
    ]


async def a_history(store: PostgresStore) -> uuid.UUID:
    """A chat of three messages of run r1, the last one with a tool call and a reasoning step."""
    chat = await store.create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))
    for text in ("hello", "hi", "let me check"):
        message = await store.create_message(
            MessageCreate(chat_uuid=chat.chat_uuid, content=text, run_id="r1")
        )
    await store.create_message_tool_call(
        MessageToolCallCreate(message_uuid=message.message_uuid, tool_call_id="c1", name="f")
    )
    await store.create_message_reasoning(
        MessageReasoningCreate(message_uuid=message.message_uuid, content="thinking")
    )
    return chat.chat_uuid


@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("writer", ["same store", "another store"])
async def test_a_cached_history_shows_every_write_from_any_store(
    open_pg: OpenStore, write: str, writer: str
) -> None:
    reader = await open_pg()
    other = await open_pg(history_cache_messages=0)
    truth = await open_pg(history_cache_messages=0)
    chat_uuid = await a_history(reader)
    await reader.get_chat_messages(chat_uuid)  # cached from here on

    await WRITES[write](reader if writer == "same store" else other, chat_uuid)

    expected = shape(await truth.get_chat_messages(chat_uuid))
    assert shape(await reader.get_chat_messages(chat_uuid)) == expected
    assert shape(await reader.get_chat_messages(chat_uuid)) == expected  # and stays so


async def test_a_repeated_read_of_an_unchanged_history_is_one_statement_and_a_copy(
    pg_url: str,
) -> None:
    statements: list[str] = []

    async def log(conn: asyncpg.Connection) -> None:
        conn.add_query_logger(lambda record: statements.append(record.query))

    async def keep_session(conn: asyncpg.Connection) -> None:
        """Release sends nothing, so only the store's own statements are logged."""

    pool = await asyncpg.create_pool(pg_url, min_size=1, max_size=2, init=log, reset=keep_session)
    try:
        store = await threadstore.open_store(pg_url, pool=pool)
        assert isinstance(store, PostgresStore)
        chat_uuid = await a_history(store)
        first = await store.get_chat_messages(chat_uuid)
        first[-1].tool_calls[0].metadata["mutated"] = True
        first[-1].content = "mutated"
        statements.clear()

        again = await store.get_chat_messages(chat_uuid)

        assert len(statements) == 1
        assert again[-1].content == "let me check"
        assert again[-1].tool_calls[0].metadata == {}
        await store.close()
    finally:
        await pool.close()


async def test_writes_of_a_rolled_back_transaction_never_reach_a_later_read(
    open_pg: OpenStore,
) -> None:
    store, other = await open_pg(), await open_pg()
    chat_uuid = await a_history(store)
    before = shape(await store.get_chat_messages(chat_uuid))

    with pytest.raises(RuntimeError):
        async with store.transaction():
            await append(store, chat_uuid)
            await edit(store, chat_uuid)
            inside = await store.get_chat_messages(chat_uuid)
            assert [m.content for m in inside][-2:] == ["let me check", "edited"]
            raise RuntimeError("roll back")

    assert shape(await store.get_chat_messages(chat_uuid)) == before
    await append(other, chat_uuid)
    after = await store.get_chat_messages(chat_uuid)
    assert [m.content for m in after] == ["hello", "hi", "let me check", "new"]


# --- foreground before background -------------------------------------------------------------

_LOCK_WAITERS = (
    "SELECT count(*) FROM pg_stat_activity"
    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
)


async def test_flushes_leave_connections_for_other_calls(pg_url: str, open_pg: OpenStore) -> None:
    pool_size = 4
    store = await open_pg(max_size=pool_size)
    chat = await store.create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))
    message = await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="a"))
    holder, watcher = await asyncpg.connect(pg_url), await asyncpg.connect(pg_url)
    flushes: list[asyncio.Future[None]] = []
    try:
        # Every flush below waits on the chat's row lock, holding its connection meanwhile.
        await holder.execute("BEGIN")
        await holder.execute("SELECT 1 FROM chats WHERE chat_uuid = $1 FOR UPDATE", chat.chat_uuid)
        flushes += [
            asyncio.ensure_future(
                store.apply_writes(
                    [UpdateMessage(message.message_uuid, MessageUpdate(content=f"{index}"))]
                )
            )
            for index in range(3 * pool_size)
        ]
        holding = pool_size - FOREGROUND_CONNECTIONS
        # (The watcher is outside any transaction: PostgreSQL's activity view is a
        # snapshot per transaction.)
        for _ in range(3_000):  # until the flushes that may hold connections do
            if await watcher.fetchval(_LOCK_WAITERS) >= holding:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError(f"{holding} flushes never reached the row lock")

        # A burst of flushes holds only its share of the pool: other calls do not wait on
        # them, and no more flushes reach the database than their share.
        found = await asyncio.wait_for(store.chats.get_chat(chat.chat_uuid), 30)
        assert found is not None and found.chat_uuid == chat.chat_uuid
        other = ChatCreate(user_uuid=chat.user_uuid, thread_id="another")
        created = await asyncio.wait_for(store.create_chat(other), 30)
        assert created.chat_uuid == other.chat_uuid
        assert await watcher.fetchval(_LOCK_WAITERS) == holding
        assert not any(flush.done() for flush in flushes)
    finally:
        await holder.close()  # ends its transaction: the flushes go on
        await watcher.close()
    await asyncio.gather(*flushes)
    stored = await store.get_message(message.message_uuid)
    assert stored is not None and stored.content in {f"{i}" for i in range(3 * pool_size)}
