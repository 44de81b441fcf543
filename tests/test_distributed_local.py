"""A distributed run manager's own runs, and runs of another process, on a shared SQLite file.

Without PostgreSQL the manager has no relay, but what it does for the runs of its own
process is the same: ``cancel_anywhere``, ``cancel_chat_run(s)`` and
``resume_chat_run`` reach them in memory. Processes sharing one SQLite file see each
other's run records, so a run another one is running (its heartbeat fresh) is refused.
Two stores opened on one file, each with its manager, stand for two processes.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest

import threadstore
from agui_scripts import ScriptedAgent, run_finished, run_input, run_started, text_message, user
from test_crash_recovery import WAIT_LIMIT
from threadstore import ConflictError, Store
from threadstore.agui._agent import StorageAgent
from threadstore.agui._distributed import DistributedRunManager
from threadstore.agui._run_handle import RunHandle
from threadstore.models import Chat, MessageStatus, RunStatus

THREAD, RUN = "thread-s", "run-s"


@pytest.fixture
def db_path(tmp_path: Path, sqlite_template: Path) -> Path:
    path = tmp_path / "threadstore.db"
    shutil.copyfile(sqlite_template, path)
    return path


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[Store]:
    opened = await threadstore.open_store(f"sqlite:///{db_path}")
    try:
        yield opened
    finally:
        await opened.close()


def script(thread: str = THREAD, run: str = RUN) -> list[Any]:
    return [
        run_started(thread, run),
        *text_message("a1", "partial answer"),
        run_finished(thread, run),
    ]


def factory(store: Store, inner: ScriptedAgent) -> Any:
    """Storage agents for whichever user the manager's ``run`` names."""

    def build(user_uuid: uuid.UUID) -> StorageAgent:
        return StorageAgent("assistant", user_uuid, store, store, inner)

    return build


async def start_paused(
    manager: DistributedRunManager[Any], inner: ScriptedAgent, user_uuid: uuid.UUID
) -> RunHandle[Any]:
    """Start the user's run; return once its agent waits in the middle of its answer."""
    handle = await manager.run(run_input(THREAD, RUN, [user("u1")]), user_uuid)
    async with asyncio.timeout(WAIT_LIMIT):
        await inner.paused.wait()
    return handle


async def chat_of(store: Store, user_uuid: uuid.UUID) -> Chat:
    chat = await store.get_chat_by_thread_id(user_uuid, THREAD)
    assert chat is not None
    return chat


async def assert_interrupted(store: Store, user_uuid: uuid.UUID, handle: RunHandle[Any]) -> None:
    """The run stopped as cancelled, and the store says so of it and of its answer."""
    assert handle.done and handle.outcome == RunStatus.INTERRUPTED
    chat = await chat_of(store, user_uuid)
    recorded = await store.get_run(chat.chat_uuid, RUN)
    assert recorded is not None and recorded.status == RunStatus.INTERRUPTED
    messages = await store.get_chat_messages(chat.chat_uuid)
    assert [(m.role, m.status) for m in messages] == [
        ("user", MessageStatus.COMPLETE),
        ("assistant", MessageStatus.INTERRUPTED),
    ]


async def test_cancel_anywhere_cancels_a_run_of_this_process(store: Store) -> None:
    inner = ScriptedAgent(script(), pause_after=3)
    alice, bob = uuid.uuid4(), uuid.uuid4()
    async with DistributedRunManager(factory(store, inner), store=store) as manager:
        handle = await start_paused(manager, inner, alice)

        # Another user names the same thread and run: nothing of Alice's is reached.
        async with asyncio.timeout(WAIT_LIMIT):
            assert not await manager.cancel_anywhere(THREAD, RUN, user_uuid=bob, wait=True)
        assert not handle.done

        async with asyncio.timeout(WAIT_LIMIT):
            assert await manager.cancel_anywhere(THREAD, RUN, user_uuid=alice, wait=True)
        # With wait, the run has stopped and its records are final when it returns.
        await assert_interrupted(store, alice, handle)
        assert inner.closed
        # A run already stopped is not live any more.
        assert not await manager.cancel_anywhere(THREAD, RUN, user_uuid=alice)


async def test_cancel_chat_run_cancels_a_run_of_this_process_by_its_chat(store: Store) -> None:
    inner = ScriptedAgent(script(), pause_after=3)
    alice = uuid.uuid4()
    async with DistributedRunManager(factory(store, inner), store=store) as manager:
        handle = await start_paused(manager, inner, alice)
        chat = await chat_of(store, alice)

        assert not await manager.cancel_chat_run(chat.chat_uuid, "no-such-run")
        assert await manager.live_chat_runs(chat.chat_uuid) == [RUN]
        async with asyncio.timeout(WAIT_LIMIT):
            assert await manager.cancel_chat_run(chat.chat_uuid, RUN, wait=True)

        await assert_interrupted(store, alice, handle)
        assert not await manager.cancel_chat_run(chat.chat_uuid, RUN)
        assert await manager.live_chat_runs(chat.chat_uuid) == []


async def test_cancel_chat_runs_cancels_the_chat_s_runs_and_no_other(store: Store) -> None:
    alice, bob = uuid.uuid4(), uuid.uuid4()
    agents = {
        alice: ScriptedAgent(script(), pause_after=3),
        bob: ScriptedAgent(script(), pause_after=3),
    }

    def build(user_uuid: uuid.UUID) -> StorageAgent:
        return StorageAgent("assistant", user_uuid, store, store, agents[user_uuid])

    async with DistributedRunManager(build, store=store) as manager:
        alices = await start_paused(manager, agents[alice], alice)
        bobs = await start_paused(manager, agents[bob], bob)
        chat = await chat_of(store, alice)

        async with asyncio.timeout(WAIT_LIMIT):
            assert await manager.cancel_chat_runs(chat.chat_uuid) == 1
        await assert_interrupted(store, alice, alices)
        # Bob's run, of another chat, goes on and ends as it would have.
        assert not bobs.done
        agents[bob].gate.set()
        async with asyncio.timeout(WAIT_LIMIT):
            await bobs.wait()
        assert bobs.outcome == RunStatus.COMPLETE
        assert await manager.cancel_chat_runs(chat.chat_uuid) == 0


async def test_resume_chat_run_follows_a_run_of_this_process(store: Store) -> None:
    inner = ScriptedAgent(script(), pause_after=3)
    alice = uuid.uuid4()
    async with DistributedRunManager(factory(store, inner), store=store) as manager:
        handle = await start_paused(manager, inner, alice)
        chat = await chat_of(store, alice)

        assert await manager.resume_chat_run(chat.chat_uuid, "no-such-run") is None
        stream = await manager.resume_chat_run(chat.chat_uuid, RUN)
        assert stream is not None
        # A client reads the first event, disconnects, and comes back after it.
        async with asyncio.timeout(WAIT_LIMIT), aclosing(stream):
            first_id, first = await anext(stream)
        assert (first_id, first.type) == (1, "RUN_STARTED")
        again = await manager.resume_chat_run(chat.chat_uuid, RUN, after=first_id)
        assert again is not None
        inner.gate.set()
        async with asyncio.timeout(WAIT_LIMIT), aclosing(again):
            rest = [(i, e.model_dump_json()) async for i, e in again]
            await handle.wait()

    expected = [(i, e.model_dump_json()) async for i, e in handle.numbered_events()]
    assert [(first_id, first.model_dump_json()), *rest] == expected
    assert [event_id for event_id, _ in expected] == list(range(1, handle.last_event_id + 1))
    assert handle.outcome == RunStatus.COMPLETE


async def test_a_run_live_in_another_process_on_the_same_file_cannot_be_started_again(
    store: Store, db_path: Path
) -> None:
    inner = ScriptedAgent(script(), pause_after=3)
    second = ScriptedAgent(script())
    alice, bob = uuid.uuid4(), uuid.uuid4()
    other_store = await threadstore.open_store(f"sqlite:///{db_path}")
    try:
        async with (
            DistributedRunManager(factory(store, inner), store=store) as owner,
            DistributedRunManager(factory(other_store, second), store=other_store) as elsewhere,
        ):
            assert owner.owner != elsewhere.owner
            handle = await start_paused(owner, inner, alice)

            with pytest.raises(ConflictError, match="already live in another process"):
                await elsewhere.run(run_input(THREAD, RUN, [user("u1")]), alice)
            # The refused run never reached its agent, and the live one goes on.
            assert second.inputs == []
            assert not handle.done
            # The owner knows the run is its own: its record is not another process's.
            with pytest.raises(ConflictError) as own:
                await owner.run(run_input(THREAD, RUN, [user("u1")]), alice)
            assert "another process" not in str(own.value)
            # Another user's run with the same ids is no conflict.
            bobs = await elsewhere.run(run_input(THREAD, RUN, [user("u1")]), bob)
            inner.gate.set()
            async with asyncio.timeout(WAIT_LIMIT):
                await bobs.wait()
                await handle.wait()
            assert bobs.outcome == RunStatus.COMPLETE
            assert handle.outcome == RunStatus.COMPLETE
    finally:
        await other_store.close()
