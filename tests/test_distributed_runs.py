"""Runs across processes on PostgreSQL: cancel through another process, resume anywhere."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import threadstore
from agui_scripts import ScriptedAgent, run_finished, run_input, run_started, text_message, user
from conftest import POSTGRES_URL_ENV, _postgres_database
from test_crash_recovery import WAIT_LIMIT, start_child, wait_for_text
from threadstore import Store
from threadstore.agui.agent import StorageAgent
from threadstore.agui.distributed import DistributedRunManager
from threadstore.models import MessageStatus, RunStatus


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """A fresh PostgreSQL database for the test."""
    server_url = os.environ.get(POSTGRES_URL_ENV)
    if not server_url:
        pytest.skip(f"{POSTGRES_URL_ENV} is not set")
    async with _postgres_database(server_url) as url:
        yield url


@pytest.fixture
async def pg_store(pg_url: str) -> AsyncIterator[Store]:
    """An open store on the test's database."""
    store = await threadstore.open_store(pg_url)
    try:
        yield store
    finally:
        await store.close()


def never_built() -> Any:
    raise AssertionError("this manager only cancels and resumes other processes' runs")


async def child_report(child: asyncio.subprocess.Process) -> tuple[list[tuple[int, str]], str]:
    """Read the child's event log and outcome once its run ends."""
    assert child.stdout is not None
    events: list[tuple[int, str]] = []
    async with asyncio.timeout(WAIT_LIMIT):
        async for raw in child.stdout:
            kind, _, rest = raw.decode().rstrip("\n").partition(" ")
            if kind == "event":
                event_id, _, event = rest.partition(" ")
                events.append((int(event_id), event))
            elif kind == "outcome":
                await child.wait()
                return events, rest
    raise AssertionError("the child ended without reporting its outcome")


@pytest.mark.postgres
async def test_a_run_is_cancelled_through_another_process_manager(
    pg_url: str, pg_store: Store
) -> None:
    user_uuid, thread, run = uuid.uuid4(), "thread-x", "run-x"
    child = await start_child(pg_url, user_uuid, thread, run, deltas=5000, delay=0.01)
    try:
        async with DistributedRunManager(never_built, store=pg_store) as other:
            assert not await other.cancel_anywhere(thread, "no-such-run")
            await wait_for_text(pg_store, user_uuid, thread)
            assert await other.cancel_anywhere(thread, run)
        events, outcome = await child_report(child)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    assert outcome == "interrupted"
    assert json.loads(events[-1][1])["code"] == "CANCELLED"
    chat = await pg_store.get_chat_by_thread_id(user_uuid, thread)
    assert chat is not None
    recorded = await pg_store.get_run(chat.chat_uuid, run)
    assert recorded is not None and recorded.status == RunStatus.INTERRUPTED
    messages = await pg_store.get_chat_messages(chat.chat_uuid)
    assert [(m.role, m.status) for m in messages] == [
        ("user", MessageStatus.COMPLETE),
        ("assistant", MessageStatus.INTERRUPTED),
    ]


@pytest.mark.postgres
async def test_a_client_resumes_another_process_run_with_no_gap_or_duplicate(
    pg_url: str, pg_store: Store
) -> None:
    user_uuid, thread, run = uuid.uuid4(), "thread-r", "run-r"
    child = await start_child(pg_url, user_uuid, thread, run, deltas=300, delay=0.003)
    try:
        async with DistributedRunManager(never_built, store=pg_store) as other:
            async with asyncio.timeout(WAIT_LIMIT):
                first = None
                while first is None:
                    first = await other.resume(thread, run)
            # The client reads some events, disconnects, and reconnects after the last one.
            seen: list[tuple[int, str]] = []
            async for event_id, event in first:
                seen.append((event_id, event.model_dump_json(by_alias=True)))
                if len(seen) == 40:
                    break
            await first.aclose()
            again = await other.resume(thread, run, after=seen[-1][0])
            assert again is not None
            async for event_id, event in again:
                seen.append((event_id, event.model_dump_json(by_alias=True)))
        events, outcome = await child_report(child)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    assert outcome == "complete"
    assert [event_id for event_id, _ in seen] == list(range(1, len(events) + 1))
    assert seen == events


def storage_factory(store: Store, script: list[Any], user_uuid: uuid.UUID) -> Any:
    def build() -> StorageAgent:
        return StorageAgent("assistant", user_uuid, store, store, ScriptedAgent(script))

    return build


@pytest.mark.postgres
async def test_relayed_events_are_written_in_batches_and_pruned_after_retention(
    pg_url: str,
    pg_store: Store,
) -> None:
    thread, run = "thread-b", "run-b"
    script = [run_started(thread, run), *text_message("a1", "x" * 2000, deltas=2000)]
    script.append(run_finished(thread, run))
    manager = DistributedRunManager(
        storage_factory(pg_store, script, uuid.uuid4()), store=pg_store, event_retention=0
    )
    async with manager:
        handle = await manager.run(run_input(thread, run, [user("u1")]))
        await handle.wait()
    raw = await asyncpg.connect(pg_url)
    try:
        assert await raw.fetchval("SELECT count(*) FROM run_events") == handle.last_event_id
        assert 0 < manager.relayed_batches < handle.last_event_id // 10

        async with DistributedRunManager(never_built, store=pg_store, event_retention=0) as sweeper:
            await sweeper.sweep()
        assert await raw.fetchval("SELECT count(*) FROM run_events") == 0
    finally:
        await raw.close()


async def test_on_sqlite_the_manager_stays_in_process(tmp_path: Path) -> None:
    store = await threadstore.open_store(f"sqlite:///{tmp_path / 'local.db'}")
    try:
        async with DistributedRunManager(never_built, store=store) as manager:
            assert manager.relay is None
            assert not await manager.cancel_anywhere("thread", "run")
            assert await manager.resume("thread", "run") is None
    finally:
        await store.close()


@pytest.mark.postgres
async def test_a_local_client_receives_each_event_only_once_it_is_stored(
    pg_url: str, pg_store: Store
) -> None:
    thread, run = "thread-d", "run-d"
    script = [run_started(thread, run), *text_message("a1", "y" * 300, deltas=300)]
    script.append(run_finished(thread, run))
    raw = await asyncpg.connect(pg_url)
    try:
        async with DistributedRunManager(
            storage_factory(pg_store, script, uuid.uuid4()), store=pg_store
        ) as manager:
            handle = await manager.run(run_input(thread, run, [user("u1")]))
            stream = await manager.resume(thread, run)
            assert stream is not None
            received = []
            async for event_id, _ in stream:
                stored = await raw.fetchval(
                    "SELECT count(*) FROM run_events WHERE run_id = $1 AND event_id = $2",
                    run,
                    event_id,
                )
                received.append((event_id, stored))
            await handle.wait()
    finally:
        await raw.close()
    assert received == [(event_id, 1) for event_id in range(1, handle.last_event_id + 1)]
