"""A run's set-up never queues behind other runs' flushes on SQLite.

Reads take no writer lock (WAL readers run beside the writer), and a flush
(``apply_writes``) lets every other waiting write go first. Checked by the order in
which things happen, never by how long they take.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from uuid import uuid4

from ag_ui.core import BaseEvent, RunAgentInput

from agui_scripts import (
    ScriptedAgent,
    collect,
    run_finished,
    run_input,
    run_started,
    text_message,
    user,
)
from sqlite_support import counting_hops, sqlite_store, until
from threadstore.agui._agent import StorageAgent
from threadstore.models import ChatCreate, MessageCreate, Run
from threadstore.store._records import WriterLock
from threadstore.store.ops import CreateMessage
from threadstore.store.sqlite import SQLiteStore


async def _hold_transaction(
    store: SQLiteStore, chat_uuid: object, inside: asyncio.Event, release: asyncio.Event
) -> None:
    """A flush-like transaction that stays open until ``release`` or until a task queues."""
    async with store.transaction():
        await store.create_message(MessageCreate(chat_uuid=chat_uuid, content="uncommitted"))
        inside.set()
        # Ends as soon as anything waits for the lock: a read that queued fails the
        # test by its order instead of hanging it.
        while not release.is_set() and store.executor.lock.waiting == 0:
            await asyncio.sleep(0)


async def test_reads_complete_while_another_task_holds_a_transaction_open(tmp_path: Path) -> None:
    user = uuid4()
    async with sqlite_store(tmp_path / "reads.db") as store:
        chat = await store.create_chat(ChatCreate(user_uuid=user, thread_id="t"))
        first = await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="hi"))
        await store.start_run(Run(chat_uuid=chat.chat_uuid, thread_id="t", run_id="r", owner="o"))
        order: list[str] = []
        inside, release = asyncio.Event(), asyncio.Event()

        async def holder() -> None:
            await _hold_transaction(store, chat.chat_uuid, inside, release)
            order.append("commit")

        holding = asyncio.ensure_future(holder())
        await inside.wait()
        with counting_hops(store) as hops:
            found = await store.get_chat_by_thread_id(user, "t")  # one row: inline
            history = await store.get_chat_messages(chat.chat_uuid)  # the reader thread
            message = await store.get_message(first.message_uuid)
            run = await store.get_run(chat.chat_uuid, "r")
        order.append("reads")
        release.set()
        await holding

    assert order == ["reads", "commit"]
    assert found is not None and found.chat_uuid == chat.chat_uuid
    # The reads see the last commit, not the open transaction's write.
    assert [m.content for m in history] == ["hi"]
    assert message is not None and run is not None
    assert store.executor.reader.calls >= 1 and hops[0] >= 1


async def test_a_queued_write_goes_before_queued_flushes(tmp_path: Path) -> None:
    async with sqlite_store(tmp_path / "order.db") as store:
        chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
        inside, release = asyncio.Event(), asyncio.Event()
        holding = asyncio.ensure_future(_hold_transaction(store, chat.chat_uuid, inside, release))
        await inside.wait()
        flushes = [
            asyncio.ensure_future(
                store.apply_writes(
                    [CreateMessage(MessageCreate(chat_uuid=chat.chat_uuid, content=f"flush {n}"))]
                )
            )
            for n in range(3)
        ]
        await until(lambda: len(store.executor.write_queue) >= 3, "the three flushes queue")
        setup = asyncio.ensure_future(
            store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="set-up"))
        )
        release.set()
        await asyncio.gather(holding, setup, *flushes)
        history = await store.get_chat_messages(chat.chat_uuid)

    assert [m.content for m in history] == [
        "uncommitted",
        "set-up",
        "flush 0",
        "flush 1",
        "flush 2",
    ]
    # They waited together, so they committed together, the set-up write first.
    assert store.executor.write_queue.groups == 1


async def test_the_writer_lock_serves_foreground_turns_first_and_survives_cancels() -> None:
    lock = WriterLock()
    order: list[str] = []

    async def turn(name: str, *, background: bool) -> None:
        async with lock.turn(background=background):
            order.append(name)

    async with lock.turn():
        tasks = [
            asyncio.ensure_future(turn("bg1", background=True)),
            asyncio.ensure_future(turn("bg2", background=True)),
            asyncio.ensure_future(turn("fg1", background=False)),
            asyncio.ensure_future(turn("gone", background=False)),
            asyncio.ensure_future(turn("fg2", background=False)),
        ]
        await until(lambda: lock.waiting >= 5, "five turns wait")
        tasks[3].cancel()  # a waiter cancelled before its turn leaves the queue
    await asyncio.gather(*tasks, return_exceptions=True)

    assert order == ["fg1", "fg2", "bg1", "bg2"]
    assert lock.idle and lock.waiting == 0


async def test_a_run_on_a_new_chat_sets_up_in_one_transaction_with_no_read_back(
    tmp_path: Path,
) -> None:
    async with sqlite_store(tmp_path / "setup.db") as store:
        statements: list[str] = []
        await store.set_trace_callback(statements.append)
        seen_at_start: list[list[str]] = []

        def script(run: RunAgentInput) -> list[BaseEvent]:
            seen_at_start.append(list(statements))  # what the set-up ran before the agent
            return [run_started("t", "r"), *text_message("a1", "Hi!"), run_finished("t", "r")]

        agent = StorageAgent("assistant", uuid4(), store, store, ScriptedAgent(script))
        agent.run_repo = store
        events = await collect(agent.run(run_input("t", "r", [user("u1", "Hello?")])))
        await store.set_trace_callback(None)
        inner = agent.inner_agent
        history = await store.get_chat_messages(agent.chat.chat_uuid)  # type: ignore[union-attr]

    (at_start,) = seen_at_start
    # The agent started before the set-up wrote anything: it needs no write.
    assert not [s for s in at_start if s.startswith(("BEGIN", "INSERT", "UPDATE", "DELETE"))]
    setup = statements[statements.index("BEGIN IMMEDIATE") :]
    setup = setup[: setup.index("COMMIT") + 1]
    # dict.fromkeys: SQLite reports a statement again for each trigger it starts.
    writes = [s for s in dict.fromkeys(setup) if s.startswith(("INSERT", "UPDATE", "DELETE"))]
    # The run record goes before the input: a refused run stores nothing.
    assert [w.split()[2] for w in writes] == ["chats", "runs", "messages"]
    # One write: the chat, the run and the input commit together, in one trip.
    assert not any("FROM messages" in s and s.startswith("SELECT") for s in statements)
    # The agent got the stored user message as its history, as read back it would be.
    assert isinstance(inner, ScriptedAgent)
    assert [m.id for m in inner.inputs[0].messages] == ["u1"]
    assert [m.agui_id for m in history] == ["u1", "a1"]
    assert events[0].type == "RUN_STARTED"


async def test_a_small_write_goes_ahead_of_flushes_inline_but_not_of_a_transaction(
    tmp_path: Path,
) -> None:
    async with sqlite_store(tmp_path / "ahead.db") as store:
        chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
        lock = store.executor.lock
        holding, release = asyncio.Event(), asyncio.Event()

        async def hold(background: bool) -> None:
            async with lock.turn(background=background):
                holding.set()
                await release.wait()

        # A flush holds the lock (its statements not running yet): a set-up write runs
        # inline, without a trip to the thread and without waiting for the flush.
        flush = asyncio.ensure_future(hold(background=True))
        await holding.wait()
        with counting_hops(store) as hops:
            ahead = await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid))
        release.set()
        await flush

        # A transaction-like foreground holder: the write waits its turn on the thread.
        holding.clear()
        release.clear()
        other = asyncio.ensure_future(hold(background=False))
        await holding.wait()
        behind = asyncio.ensure_future(
            store.create_message(MessageCreate(chat_uuid=chat.chat_uuid))
        )
        await until(lambda: lock.waiting > 0, "a write waits for the lock")
        assert not behind.done()
        release.set()
        await asyncio.gather(other, behind)

    assert hops == [0] and ahead.chat_uuid == chat.chat_uuid
