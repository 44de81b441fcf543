"""SQLite writes that wait for the writer commit together, each atomic on its own.

Checked on a real file by what is stored, the number of trips to the database thread
and the order of records, never by how long anything takes.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from uuid import uuid4

import pytest

from sqlite_support import counting_hops, sqlite_store, until
from threadstore import ChatCreate, MessageCreate, NotFoundError, Run
from threadstore.errors import RunLiveError, StoreUnavailableError
from threadstore.store._sqlite_writes import Statement, run_group
from threadstore.store.sqlite import SQLiteStore


async def _hold_the_writer(store: SQLiteStore, until_queued: int) -> asyncio.Future[None]:
    """Hold the writer in a transaction until ``until_queued`` writes wait in the queue."""

    async def hold() -> None:
        async with store.transaction():
            await until(lambda: len(store.executor.write_queue) >= until_queued, "the writes queue")

    holder = asyncio.ensure_future(hold())
    await until(lambda: not store.executor.lock.idle, "the transaction holds the writer")
    return holder


async def test_writes_queued_behind_a_transaction_commit_in_one_trip(tmp_path: Path) -> None:
    async with sqlite_store(tmp_path / "group.db") as store:
        chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
        holder = await _hold_the_writer(store, until_queued=20)
        writes = [
            asyncio.ensure_future(
                store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content=f"m{n}"))
            )
            for n in range(20)
        ]
        await until(lambda: len(store.executor.write_queue) >= 20, "twenty writes queue")
        with counting_hops(store) as hops:
            await holder
            stored = await asyncio.gather(*writes)
        history = await store.get_chat_messages(chat.chat_uuid)

    # The transaction's COMMIT, then one trip for the 20 writes.
    assert hops[0] == 2 and store.executor.write_queue.groups == 1
    assert [m.content for m in stored] == [f"m{n}" for n in range(20)]
    # Each under the one before, in the order they asked.
    assert [m.content for m in history] == [f"m{n}" for n in range(20)]


async def test_a_write_that_fails_in_a_group_fails_alone(tmp_path: Path) -> None:
    async with sqlite_store(tmp_path / "alone.db") as store:
        chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
        await store.start_run(Run(chat_uuid=chat.chat_uuid, thread_id="t", run_id="r0"))
        holder = await _hold_the_writer(store, until_queued=4)
        writes = [
            asyncio.ensure_future(
                store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="before"))
            ),
            # The chat has a running run already: refused, nothing of it written.
            asyncio.ensure_future(
                store.start_run(Run(chat_uuid=chat.chat_uuid, thread_id="t", run_id="r1"))
            ),
            # No such parent: refused.
            asyncio.ensure_future(
                store.create_message(
                    MessageCreate(chat_uuid=chat.chat_uuid, parent_uuid=uuid4(), content="orphan")
                )
            ),
            asyncio.ensure_future(
                store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="after"))
            ),
        ]
        await holder
        outcomes = await asyncio.gather(*writes, return_exceptions=True)
        history = await store.get_chat_messages(chat.chat_uuid)
        refused_run = await store.get_run(chat.chat_uuid, "r1")

    assert store.executor.write_queue.groups == 1
    assert isinstance(outcomes[1], RunLiveError) and outcomes[1].live_run_id == "r0"
    assert isinstance(outcomes[2], NotFoundError)
    assert [m.content for m in history] == ["before", "after"]
    assert refused_run is None


async def test_a_write_whose_caller_gave_up_before_it_ran_is_not_written(tmp_path: Path) -> None:
    async with sqlite_store(tmp_path / "gone.db") as store:
        chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
        holder = await _hold_the_writer(store, until_queued=2)
        writes = [
            asyncio.ensure_future(
                store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content=text))
            )
            for text in ("kept", "dropped")
        ]
        await until(lambda: len(store.executor.write_queue) >= 2, "two writes queue")
        writes[1].cancel()
        await holder
        await asyncio.gather(*writes, return_exceptions=True)
        history = await store.get_chat_messages(chat.chat_uuid)

    assert [m.content for m in history] == ["kept"]


def test_a_group_whose_transaction_fails_runs_each_write_alone(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "raw.db", isolation_level=None)
    conn.execute("CREATE TABLE t (v TEXT NOT NULL UNIQUE)")
    conn.execute("INSERT INTO t (v) VALUES ('taken')")
    insert = [Statement("INSERT INTO t (v) VALUES (?) RETURNING v", ("a",))]
    # A conflict that makes SQLite roll the whole transaction back, savepoints and all.
    breaks = [Statement("INSERT OR ROLLBACK INTO t (v) VALUES (?)", ("taken",))]
    other = [Statement("INSERT INTO t (v) VALUES (?) RETURNING v", ("b",))]

    outcomes = run_group(conn, [insert, breaks, other])

    assert outcomes[0] == [[("a",)]] and outcomes[2] == [[("b",)]]
    assert isinstance(outcomes[1], sqlite3.IntegrityError)
    assert conn.execute("SELECT v FROM t ORDER BY v").fetchall() == [("a",), ("b",), ("taken",)]
    assert not conn.in_transaction


@pytest.mark.parametrize("size", [1, 2, 5])
def test_a_group_returns_what_each_write_returns_alone(tmp_path: Path, size: int) -> None:
    conn = sqlite3.connect(tmp_path / "same.db", isolation_level=None)
    conn.execute("CREATE TABLE t (v INTEGER NOT NULL UNIQUE)")
    writes = [
        [Statement("INSERT INTO t (v) VALUES (?) RETURNING v", (n,)) for n in (k, k + 100)]
        for k in range(size)
    ]
    duplicate = [Statement("INSERT INTO t (v) VALUES (?) RETURNING v", (0,))]

    outcomes = run_group(conn, [*writes, duplicate])

    assert outcomes[:size] == [[[(k,)], [(k + 100,)]] for k in range(size)]
    assert isinstance(outcomes[size], sqlite3.IntegrityError)
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (2 * size,)


def test_a_healthy_group_runs_its_statements_alone_and_a_failing_one_finds_who_failed(
    tmp_path: Path,
) -> None:
    conn = sqlite3.connect(tmp_path / "trace.db", isolation_level=None)
    conn.execute("CREATE TABLE t (v INTEGER NOT NULL UNIQUE)")
    traced: list[str] = []
    conn.set_trace_callback(traced.append)
    writes = [[Statement("INSERT INTO t (v) VALUES (?)", (n,))] for n in range(3)]

    run_group(conn, writes)
    healthy, traced[:] = list(traced), []
    outcomes = run_group(conn, [[Statement("INSERT INTO t (v) VALUES (?)", (9,))], writes[0]])

    # One transaction, no savepoints: each extra statement waits for a busy interpreter.
    assert [line.split(" ")[0] for line in healthy] == [
        "BEGIN",
        "INSERT",
        "INSERT",
        "INSERT",
        "COMMIT",
    ]
    # A write that fails sends the group through savepoints: the other one still commits.
    assert any(line.startswith("SAVEPOINT") for line in traced)
    assert isinstance(outcomes[1], sqlite3.IntegrityError) and outcomes[0] == [[]]
    assert conn.execute("SELECT v FROM t ORDER BY v").fetchall() == [(0,), (1,), (2,), (9,)]


async def test_a_group_that_meets_another_processs_lock_fails_every_write_after_one_wait(
    tmp_path: Path,
) -> None:
    # Another connection (another process, for SQLite) holds the file's write lock past
    # the store's timeout while writes wait in the queue: the group's transaction cannot
    # begin. Every write of it gets StoreUnavailableError, nothing is written, and the
    # group waited once, not once more per write.
    path = tmp_path / "locked.db"
    async with sqlite_store(path, "?timeout=0.2") as store:
        chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
        # The queue's own wait for the writer turn is not under test: however slow the
        # machine, it must not give up before the group meets the file's lock.
        store.executor.lock.timeout = None
        taken, release = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with store.executor.lock.turn():
                taken.set()
                await release.wait()

        holder = asyncio.ensure_future(hold())
        await taken.wait()
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            writes = [
                asyncio.ensure_future(
                    store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content=f"m{n}"))
                )
                for n in range(3)
            ]
            await until(lambda: len(store.executor.write_queue) >= 3, "three writes queue")
            traced: list[str] = []
            await store.executor.set_trace_callback(traced.append)
            release.set()
            await holder
            outcomes = await asyncio.gather(*writes, return_exceptions=True)
            await store.executor.set_trace_callback(None)
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert all(isinstance(o, StoreUnavailableError) for o in outcomes), outcomes
        assert store.executor.write_queue.groups == 1
        # The group's BEGIN was the only statement that waited for the lock.
        assert [line.split(" ")[0] for line in traced] == ["BEGIN"]
        assert await store.get_chat_messages(chat.chat_uuid) == []
        # The lock gone, the store writes again.
        await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="later"))
        assert [m.content for m in await store.get_chat_messages(chat.chat_uuid)] == ["later"]


def test_a_group_whose_commit_fails_runs_each_write_alone_and_keeps_the_good_ones(
    tmp_path: Path,
) -> None:
    # A deferred constraint is checked at COMMIT: the group's transaction fails as a whole
    # after every statement ran. Each write then runs alone, as without the queue: the
    # good ones commit, the one that breaks the constraint gets its own error.
    conn = sqlite3.connect(tmp_path / "deferred.db", isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    conn.execute(
        "CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER"
        " REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
    )
    conn.execute("INSERT INTO parent (id) VALUES (1)")
    good = [Statement("INSERT INTO child (id, parent) VALUES (?, ?) RETURNING id", (10, 1))]
    orphan = [Statement("INSERT INTO child (id, parent) VALUES (?, ?) RETURNING id", (11, 99))]
    also = [
        Statement("INSERT INTO parent (id) VALUES (?)", (2,)),
        Statement("INSERT INTO child (id, parent) VALUES (?, ?) RETURNING id", (12, 2)),
    ]

    outcomes = run_group(conn, [good, orphan, also])

    assert outcomes[0] == [[(10,)]] and outcomes[2] == [[], [(12,)]]
    assert isinstance(outcomes[1], sqlite3.IntegrityError)
    assert conn.execute("SELECT id FROM child ORDER BY id").fetchall() == [(10,), (12,)]
    assert not conn.in_transaction
