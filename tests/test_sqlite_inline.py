"""Small SQLite calls run inline on the event loop; everything else on the store's database thread.

What a user relies on: an inline write is committed when the call returns, a write
that meets another process's lock waits for it instead of failing, a transaction of
another task keeps its place, a loop of inline calls lets other tasks run, and the WAL
does not grow without bound. The thread round trips are counted, not timed.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from uuid import UUID, uuid4

import pytest

from sqlite_support import counting_hops, sqlite_store
from threadstore import ChatCreate, MessageCreate
from threadstore.errors import ConfigurationError
from threadstore.store._records import WriterLock
from threadstore.store.sqlite import (
    CHECKPOINT_EVERY_WRITES,
    INLINE_MAX_BYTES,
    SQLiteStore,
    sqlite_options,
)


class RolledBack(Exception):
    """Raised inside a transaction to roll it back."""


def stored_contents(path: Path, chat_uuid: UUID) -> list[str]:
    """The chat's message contents, read on a connection of the test's own."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT content FROM messages WHERE chat_uuid = ? ORDER BY seq", (str(chat_uuid),)
        ).fetchall()
    return [row[0] for row in rows]


async def new_chat(store: SQLiteStore) -> UUID:
    chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
    return chat.chat_uuid


async def test_small_calls_run_inline_and_are_committed_when_they_return(tmp_path: Path) -> None:
    path = tmp_path / "inline.db"
    async with sqlite_store(path) as store:
        with counting_hops(store) as hops:
            chat_uuid = await new_chat(store)
            message = await store.create_message(MessageCreate(chat_uuid=chat_uuid, content="hi"))
            on_disk = stored_contents(path, chat_uuid)  # another connection sees it already
            found = await store.get_message(message.message_uuid)
            chat = await store.chats.get_chat(chat_uuid)

    assert hops == [0]
    assert on_disk == ["hi"]
    assert found is not None and found.content == "hi"
    assert chat is not None and chat.active_leaf_uuid == message.message_uuid


@pytest.mark.parametrize("query", ["?inline=off", "?inline=0", "?inline=false"])
async def test_inline_off_sends_every_call_to_the_thread(tmp_path: Path, query: str) -> None:
    async with sqlite_store(tmp_path / "thread.db", query) as store:
        chat_uuid = await new_chat(store)
        with counting_hops(store) as hops:
            await store.create_message(MessageCreate(chat_uuid=chat_uuid, content="hi"))
            await store.chats.get_chat(chat_uuid)

    assert store.executor.inline is False
    assert hops == [2]


def test_sqlite_url_options_are_checked() -> None:
    assert sqlite_options("sqlite:///a.db") == {}
    assert sqlite_options("sqlite:///a.db?inline=on") == {"inline": True}
    with pytest.raises(ConfigurationError, match="unknown option 'inlined'"):
        sqlite_options("sqlite:///a.db?inlined=on")
    with pytest.raises(ConfigurationError, match="use on or off"):
        sqlite_options("sqlite:///a.db?inline=maybe")


async def test_a_write_larger_than_the_inline_bound_goes_to_the_thread(tmp_path: Path) -> None:
    path = tmp_path / "large.db"
    big = "x" * (INLINE_MAX_BYTES + 1)
    async with sqlite_store(path) as store:
        chat_uuid = await new_chat(store)
        with counting_hops(store) as hops:
            await store.create_message(MessageCreate(chat_uuid=chat_uuid, content=big))

    assert hops == [1]
    assert stored_contents(path, chat_uuid) == [big]


async def test_a_write_meeting_another_process_lock_waits_for_it(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    loop = asyncio.get_running_loop()
    running = asyncio.Event()
    async with sqlite_store(path) as store:
        chat_uuid = await new_chat(store)
        # Called on the thread that runs a statement, as the statement starts.
        await store.executor.thread.call(
            lambda conn: conn.set_trace_callback(lambda _: loop.call_soon_threadsafe(running.set))
        )
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # holds the file's write lock
            with counting_hops(store) as hops:
                write = asyncio.ensure_future(
                    store.create_message(MessageCreate(chat_uuid=chat_uuid, content="after"))
                )
                await running.wait()  # the write runs into the lock
                other.execute("COMMIT")
                await write  # neither failed with "database is locked" nor returned early
        finally:
            other.close()

    assert hops == [1]  # it went to the thread, whose busy_timeout waits
    assert stored_contents(path, chat_uuid) == ["after"]


async def test_another_task_transaction_keeps_its_place(tmp_path: Path) -> None:
    path = tmp_path / "order.db"
    async with sqlite_store(path) as store:
        chat_uuid = await new_chat(store)
        inside = asyncio.Event()
        release = asyncio.Event()

        async def transaction() -> None:
            async with store.transaction():
                await store.create_message(MessageCreate(chat_uuid=chat_uuid, content="first"))
                inside.set()
                await release.wait()
                raise RolledBack

        holder = asyncio.ensure_future(transaction())
        await inside.wait()
        later = asyncio.ensure_future(
            store.create_message(MessageCreate(chat_uuid=chat_uuid, content="second"))
        )
        # "second" runs until it waits: for the transaction, or (wrongly) inside it, on the
        # connection or in the thread's queue ahead of the rollback.
        await asyncio.sleep(0)
        release.set()
        await asyncio.sleep(0)  # the transaction ends; "second" is due but has not run yet
        last = await store.create_message(MessageCreate(chat_uuid=chat_uuid, content="third"))
        with pytest.raises(RolledBack):
            await holder
        await later

    # "second" did not slip into the rolled-back transaction, nor "third" past "second".
    assert stored_contents(path, chat_uuid) == ["second", "third"]
    assert last.parent_uuid == later.result().message_uuid


async def test_a_lookup_while_the_writer_is_busy_goes_to_the_reader(tmp_path: Path) -> None:
    # An inline call lets go of the interpreter's lock inside SQLite and must take it back
    # after: beside a thread busy with a long write (a retention sweep) each take-back can
    # wait out a whole switch interval, and the event loop with it.
    path = tmp_path / "busy-writer.db"
    async with sqlite_store(path) as store:
        chat_uuid = await new_chat(store)
        message = await store.create_message(MessageCreate(chat_uuid=chat_uuid, content="hi"))
        inside = asyncio.Event()
        release = asyncio.Event()

        async def transaction() -> None:
            async with store.transaction():
                await store.update_chat_name(chat_uuid, "busy")
                inside.set()
                await release.wait()

        holder = asyncio.ensure_future(transaction())
        await inside.wait()
        with counting_hops(store) as busy:
            found = await store.get_message(message.message_uuid)
        release.set()
        await holder
        with counting_hops(store) as idle:
            again = await store.get_message(message.message_uuid)

    assert busy[0] > 0  # its queries ran on the reader's thread, which never waits for the writer
    assert idle == [0]  # inline again once the writer is idle
    assert found is not None and again is not None and found.content == again.content == "hi"


async def test_the_writer_lock_is_not_idle_while_a_released_waiter_has_yet_to_run() -> None:
    lock = WriterLock()
    order: list[str] = []

    async def queued() -> None:
        async with lock.turn():
            order.append("queued")

    async with lock.turn():
        waiter = asyncio.ensure_future(queued())
        await asyncio.sleep(0)  # the waiter is in the lock's queue
        assert not lock.idle
    # Released: the waiter is due but has not run. An inline call now would jump it.
    assert not waiter.done()
    assert not lock.idle
    await waiter
    assert lock.idle and order == ["queued"]


async def test_a_waiter_cancelled_as_the_lock_is_released_leaves_the_lock_free() -> None:
    # The holder releases after the waiter was cancelled but before it ran: the release
    # already dropped the cancelled waiter, which must then only re-raise its cancel.
    lock = WriterLock()

    async def queued() -> None:
        async with lock.turn():
            pass

    async with lock.turn():
        waiter = asyncio.ensure_future(queued())
        await asyncio.sleep(0)  # the waiter is in the lock's queue
        waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert lock.idle and lock.waiting == 0
    async with asyncio.timeout(1), lock.turn():  # free, not held by the gone waiter
        pass


async def test_a_loop_of_inline_calls_lets_other_tasks_run(tmp_path: Path) -> None:
    ticks = 0
    stop = False

    async def ticker() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0)

    async with sqlite_store(tmp_path / "fair.db") as store:
        chat_uuid = await new_chat(store)
        task = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        before = ticks
        for index in range(50):
            await store.create_message(MessageCreate(chat_uuid=chat_uuid, content=f"{index}"))
        during = ticks - before
        stop = True
        await task

    assert during >= 50  # the ticker ran at least once per write


async def wal_after_writes(path: Path, writes: int, every: int) -> tuple[int, int]:
    """(checkpoints run, WAL file bytes) after ``writes`` inline appends to a new chat."""
    async with sqlite_store(path) as store:
        store.executor.checkpoint_every_writes = every
        chat_uuid = await new_chat(store)
        for index in range(writes):
            await store.create_message(MessageCreate(chat_uuid=chat_uuid, content=f"{index:>500}"))
        checkpoints = store.executor.checkpoints
        wal_bytes = Path(f"{path}-wal").stat().st_size  # closing the store removes it
    assert len(stored_contents(path, chat_uuid)) == writes
    return checkpoints, wal_bytes


async def test_inline_writes_are_checkpointed_so_the_wal_stays_bounded(tmp_path: Path) -> None:
    writes = 10 * CHECKPOINT_EVERY_WRITES
    checkpoints, wal_bytes = await wal_after_writes(
        tmp_path / "wal.db", writes, CHECKPOINT_EVERY_WRITES
    )
    never, unchecked_bytes = await wal_after_writes(tmp_path / "unchecked.db", writes, 0)

    assert never == 0 and checkpoints >= writes // CHECKPOINT_EVERY_WRITES - 1
    # The WAL file keeps its largest size; checkpoints let it restart from the start,
    # so it holds about one checkpoint interval of pages instead of every page written.
    assert wal_bytes * 4 < unchecked_bytes


async def test_a_store_used_from_another_thread_goes_through_the_database_thread(
    tmp_path: Path,
) -> None:
    path = tmp_path / "threads.db"
    async with sqlite_store(path) as store:
        chat_uuid = await new_chat(store)
        failures: list[BaseException] = []

        def elsewhere() -> None:
            try:
                asyncio.run(
                    store.create_message(MessageCreate(chat_uuid=chat_uuid, content="elsewhere"))
                )
            except BaseException as exc:  # pragma: no cover - reported below
                failures.append(exc)

        thread = threading.Thread(target=elsewhere)
        thread.start()
        await asyncio.to_thread(thread.join)

    assert failures == []
    assert stored_contents(path, chat_uuid) == ["elsewhere"]
