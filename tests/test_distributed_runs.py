"""Runs across processes on PostgreSQL: cancel through another process, resume anywhere."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import threadstore
from agui_scripts import ScriptedAgent, run_finished, run_input, run_started, text_message, user
from postgres_support import clean_database, server_url
from test_crash_recovery import WAIT_LIMIT, start_child, wait_for_text
from threadstore import ChatCreate, ConflictError, InvalidInputError, Store
from threadstore.agui._agent import StorageAgent
from threadstore.agui._distributed import DistributedRunManager
from threadstore.agui._relay import EventRelay
from threadstore.agui._run_handle import RunHandle
from threadstore.models import MessageStatus, RunStatus


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """A fresh PostgreSQL database for the test."""
    server = server_url()
    async with clean_database(server) as url:
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
            assert not await other.cancel_anywhere(thread, "no-such-run", user_uuid=user_uuid)
            await wait_for_text(pg_store, user_uuid, thread)
            assert await other.cancel_anywhere(thread, run, user_uuid=user_uuid)
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
                    first = await other.resume(thread, run, user_uuid=user_uuid)
            # The client reads some events, disconnects, and reconnects after the last one.
            seen: list[tuple[int, str]] = []
            async for event_id, event in first:
                seen.append((event_id, event.model_dump_json(by_alias=True)))
                if len(seen) == 40:
                    break
            await first.aclose()
            again = await other.resume(thread, run, after=seen[-1][0], user_uuid=user_uuid)
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
            assert not await manager.cancel_anywhere("thread", "run", user_uuid=uuid.uuid4())
            assert await manager.resume("thread", "run", user_uuid=uuid.uuid4()) is None
    finally:
        await store.close()


@pytest.mark.postgres
async def test_a_local_client_receives_each_event_only_once_it_is_stored(
    pg_url: str, pg_store: Store
) -> None:
    thread, run, user_uuid = "thread-d", "run-d", uuid.uuid4()
    script = [run_started(thread, run), *text_message("a1", "y" * 300, deltas=300)]
    script.append(run_finished(thread, run))
    raw = await asyncpg.connect(pg_url)
    try:
        async with DistributedRunManager(
            storage_factory(pg_store, script, user_uuid), store=pg_store
        ) as manager:
            handle = await manager.run(run_input(thread, run, [user("u1")]))
            stream = await manager.resume(thread, run, user_uuid=user_uuid)
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


# --- runs are reached only through their owner ---------------------------------------------


def paused_factory(store: Store, inner: ScriptedAgent) -> Any:
    """Build storage agents for whichever user the manager's ``run`` names."""

    def build(user_uuid: uuid.UUID) -> StorageAgent:
        return StorageAgent("assistant", user_uuid, store, store, inner, checkpoint_interval=0.05)

    return build


def paused_script(thread: str, run: str) -> list[Any]:
    return [
        run_started(thread, run),
        *text_message("a1", "partial answer"),
        run_finished(thread, run),
    ]


TwoManagers = tuple[DistributedRunManager[Any], DistributedRunManager[Any], ScriptedAgent]
"""The run's owner, another process's manager, and the owner's gated agent."""


@pytest.fixture
async def two_managers(pg_store: Store) -> AsyncIterator[TwoManagers]:
    """Two managers on one database, as two server processes; the first runs a gated agent."""
    inner = ScriptedAgent(paused_script("thread-s", "run-s"), pause_after=3)
    owner = DistributedRunManager(paused_factory(pg_store, inner), store=pg_store)
    other = DistributedRunManager(never_built, store=pg_store)
    async with owner, other:
        try:
            yield owner, other, inner
        finally:
            inner.gate.set()


async def start_paused(managers: TwoManagers, user_uuid: uuid.UUID) -> RunHandle[Any]:
    """Start ``user_uuid``'s run "thread-s"/"run-s" on the owner; return once it paused."""
    owner, _, inner = managers
    handle = await owner.run(run_input("thread-s", "run-s", [user("u1")]), user_uuid)
    await inner.paused.wait()
    return handle


@pytest.mark.postgres
async def test_another_user_reaches_no_run_through_its_thread_and_run_ids(
    pg_store: Store,
    two_managers: TwoManagers,
) -> None:
    owner, other, _ = two_managers
    alice, bob = uuid.uuid4(), uuid.uuid4()
    handle = await start_paused(two_managers, alice)
    # Bob even has a thread of his own with the same id.
    await pg_store.create_chat(ChatCreate(user_uuid=bob, thread_id="thread-s"))

    assert await other.resume("thread-s", "run-s", user_uuid=bob) is None
    assert not await other.cancel_anywhere("thread-s", "run-s", user_uuid=bob)
    assert await owner.resume("thread-s", "run-s", user_uuid=bob) is None
    assert not await owner.cancel_anywhere("thread-s", "run-s", user_uuid=bob)
    assert not handle.done

    stream = await other.resume("thread-s", "run-s", user_uuid=alice)
    assert stream is not None
    async with aclosing(stream):
        first = await anext(stream)
    assert first[0] == 1 and first[1].type == "RUN_STARTED"
    assert await other.cancel_anywhere("thread-s", "run-s", user_uuid=alice, wait=True)
    await handle.wait()
    assert handle.outcome == RunStatus.INTERRUPTED


@pytest.mark.postgres
async def test_trusted_callers_resume_and_cancel_by_chat_uuid(
    pg_store: Store,
    two_managers: TwoManagers,
) -> None:
    _, other, _ = two_managers
    alice = uuid.uuid4()
    handle = await start_paused(two_managers, alice)
    chat = await pg_store.get_chat_by_thread_id(alice, "thread-s")
    assert chat is not None

    assert await other.resume_chat_run(chat.chat_uuid, "no-such-run") is None
    assert await other.live_chat_runs(chat.chat_uuid) == ["run-s"]
    stream = await other.resume_chat_run(chat.chat_uuid, "run-s")
    assert stream is not None
    received: list[tuple[int, str]] = []

    async def read() -> None:
        async with aclosing(stream):
            async for event_id, event in stream:
                received.append((event_id, event.model_dump_json(by_alias=True)))

    reader = asyncio.create_task(read())
    assert await other.cancel_chat_run(chat.chat_uuid, "run-s", wait=True)
    recorded = await pg_store.get_run(chat.chat_uuid, "run-s")
    assert recorded is not None and recorded.status == RunStatus.INTERRUPTED
    async with asyncio.timeout(WAIT_LIMIT):
        await reader
    await handle.wait()
    expected = [(i, e.model_dump_json(by_alias=True)) async for i, e in handle.numbered_events()]
    assert received == expected
    assert json.loads(received[-1][1])["code"] == "CANCELLED"
    assert not await other.cancel_chat_run(chat.chat_uuid, "run-s")
    assert await other.live_chat_runs(chat.chat_uuid) == []


@pytest.mark.postgres
async def test_a_run_live_in_another_process_cannot_be_started_again(
    pg_store: Store,
    two_managers: TwoManagers,
) -> None:
    _, _, inner = two_managers
    alice, bob = uuid.uuid4(), uuid.uuid4()
    handle = await start_paused(two_managers, alice)
    second = ScriptedAgent(paused_script("thread-s", "run-s"))
    async with DistributedRunManager(paused_factory(pg_store, second), store=pg_store) as elsewhere:
        with pytest.raises(ConflictError):
            await elsewhere.run(run_input("thread-s", "run-s", [user("u1")]), alice)
        assert second.inputs == []
        # Another user's run with the same ids is no conflict.
        bobs = await elsewhere.run(run_input("thread-s", "run-s", [user("u1")]), bob)
        await bobs.wait()
        assert bobs.outcome == RunStatus.COMPLETE
    inner.gate.set()
    await handle.wait()
    assert handle.outcome == RunStatus.COMPLETE


@pytest.mark.postgres
async def test_resuming_after_the_last_event_of_a_finished_run_elsewhere_ends_at_once(
    pg_store: Store,
    two_managers: TwoManagers,
) -> None:
    owner, other, inner = two_managers
    alice = uuid.uuid4()
    inner.gate.set()
    handle = await owner.run(run_input("thread-s", "run-s", [user("u1")]), alice)
    await handle.wait()
    await owner.close()  # every relayed event is stored
    last = handle.last_event_id
    assert other.relay is not None
    other.relay.end_grace = 3600.0  # a wait for a synthesized end would hang the test

    stream = await other.resume("thread-s", "run-s", after=last, user_uuid=alice)
    assert stream is not None
    assert [pair async for pair in stream] == []
    with pytest.raises(InvalidInputError):
        await other.resume("thread-s", "run-s", after=last + 1, user_uuid=alice)
    tail = await other.resume("thread-s", "run-s", after=last - 1, user_uuid=alice)
    assert tail is not None
    assert [event_id async for event_id, _ in tail] == [last]


# --- the listening connection comes back ----------------------------------------------------


async def drop_listener(pg_url: str, relay: EventRelay) -> None:
    """Terminate the relay's listening connection from the server side; wait until it noticed."""
    pid = relay.listener_pid
    assert pid is not None
    raw = await asyncpg.connect(pg_url)
    try:
        assert await raw.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await raw.close()
    async with asyncio.timeout(WAIT_LIMIT):
        while relay.listener_pid == pid:
            await asyncio.sleep(0.01)


def hold_reconnect(relay: EventRelay) -> asyncio.Event:
    """Make the relay's next attempts to listen wait until the returned event is set."""
    release = asyncio.Event()
    listen = relay._listen

    async def held() -> None:
        await release.wait()
        await listen()

    relay._listen = held  # type: ignore[method-assign]
    return release


async def wait_reconnected(relay: EventRelay, reconnects: int = 1) -> None:
    async with asyncio.timeout(WAIT_LIMIT):
        while relay.reconnects < reconnects or not relay.listening:
            await asyncio.sleep(0.01)


@pytest.mark.postgres
async def test_cancel_requests_arrive_again_once_the_lost_listener_is_back(
    pg_url: str,
    two_managers: TwoManagers,
) -> None:
    owner, other, _ = two_managers
    alice = uuid.uuid4()
    handle = await start_paused(two_managers, alice)
    assert owner.relay is not None
    await drop_listener(pg_url, owner.relay)
    await wait_reconnected(owner.relay)

    assert await other.cancel_anywhere("thread-s", "run-s", user_uuid=alice)
    async with asyncio.timeout(WAIT_LIMIT):
        await handle.wait()
    assert handle.outcome == RunStatus.INTERRUPTED


@pytest.mark.postgres
async def test_a_cancel_sent_while_the_owner_is_not_listening_is_repeated_until_heard(
    pg_url: str,
    pg_store: Store,
    two_managers: TwoManagers,
) -> None:
    owner, other, _ = two_managers
    alice = uuid.uuid4()
    handle = await start_paused(two_managers, alice)
    assert owner.relay is not None and other.relay is not None
    other.relay.liveness_interval = 0.05
    release = hold_reconnect(owner.relay)
    await drop_listener(pg_url, owner.relay)

    sent: list[bool] = []
    first_sent = asyncio.Event()
    notify = other.relay._notify_cancel

    async def counted(*args: Any) -> bool:
        sent.append(await notify(*args))
        first_sent.set()
        return sent[-1]

    other.relay._notify_cancel = counted  # type: ignore[method-assign]
    cancel = asyncio.create_task(
        other.cancel_anywhere("thread-s", "run-s", user_uuid=alice, wait=True)
    )
    async with asyncio.timeout(WAIT_LIMIT):
        await first_sent.wait()  # this request is lost: nobody listens for it
        release.set()
        assert await cancel
    # Sent twice at least: the lost request and the one heard. A repeat that goes out
    # after the owner stopped the run finds nothing running and reports False.
    assert sent[:2] == [True, True]
    assert handle.outcome == RunStatus.INTERRUPTED
    chat = await pg_store.get_chat_by_thread_id(alice, "thread-s")
    assert chat is not None
    messages = await pg_store.get_chat_messages(chat.chat_uuid)
    assert messages[-1].status == MessageStatus.INTERRUPTED


@pytest.mark.postgres
async def test_a_reader_waiting_while_the_listener_is_lost_misses_no_event(
    pg_url: str,
    two_managers: TwoManagers,
) -> None:
    _, other, inner = two_managers
    alice = uuid.uuid4()
    handle = await start_paused(two_managers, alice)
    assert other.relay is not None
    # Only a notification or the reconnect itself may wake the reader.
    other.relay.liveness_interval = 3600.0
    stream = await other.resume("thread-s", "run-s", user_uuid=alice)
    assert stream is not None
    received: list[tuple[int, str]] = []
    waiting = asyncio.Event()

    async def read() -> None:
        async with aclosing(stream):
            async for event_id, event in stream:
                received.append((event_id, event.model_dump_json(by_alias=True)))
                if event_id == 3:  # everything before the gate
                    waiting.set()

    reader = asyncio.create_task(read())
    async with asyncio.timeout(WAIT_LIMIT):
        await waiting.wait()
    release = hold_reconnect(other.relay)
    await drop_listener(pg_url, other.relay)

    # The rest of the run is produced and stored while the reader's process is deaf.
    inner.gate.set()
    await handle.wait()
    raw = await asyncpg.connect(pg_url)
    try:
        async with asyncio.timeout(WAIT_LIMIT):
            while await raw.fetchval("SELECT count(*) FROM run_events") < handle.last_event_id:
                await asyncio.sleep(0.01)
    finally:
        await raw.close()
    assert len(received) == 3
    release.set()
    async with asyncio.timeout(WAIT_LIMIT):
        await reader
    assert other.relay.reconnects == 1
    expected = [(i, e.model_dump_json(by_alias=True)) async for i, e in handle.numbered_events()]
    assert received == expected


@pytest.mark.postgres
async def test_the_relay_keeps_trying_to_listen_until_it_succeeds(
    pg_url: str, pg_store: Store
) -> None:
    async with DistributedRunManager(never_built, store=pg_store) as manager:
        relay = manager.relay
        assert relay is not None
        relay.reconnect_delay = 0.001
        attempts = 0
        listen = relay._listen

        async def refused_three_times() -> None:
            nonlocal attempts
            attempts += 1
            if attempts <= 3:
                raise ConnectionRefusedError("the server is restarting")
            await listen()

        relay._listen = refused_three_times  # type: ignore[method-assign]
        lost = relay.listener_pid
        await drop_listener(pg_url, relay)
        await wait_reconnected(relay)
        assert (attempts, relay.reconnects) == (4, 1)
        assert relay.listener_pid not in (None, lost)


@pytest.mark.postgres
async def test_a_failed_relay_write_is_retried_and_no_event_is_lost(
    pg_url: str, pg_store: Store
) -> None:
    thread, run = "thread-f", "run-f"
    script = [run_started(thread, run), *text_message("a1", "y" * 300, deltas=300)]
    script.append(run_finished(thread, run))
    manager = DistributedRunManager(
        storage_factory(pg_store, script, uuid.uuid4()),
        store=pg_store,
        relay_flush_interval=0.001,
        relay_batch_size=16,
    )
    assert manager.relay is not None
    append = manager.relay.append
    failures = 0

    async def flaky_append(*args: Any) -> None:
        nonlocal failures
        if failures < 3:  # the first three writes fail, as when the database is restarting
            failures += 1
            raise asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed")
        await append(*args)

    manager.relay.append = flaky_append  # type: ignore[method-assign]
    async with manager:
        handle = await manager.run(run_input(thread, run, [user("u1")]))
        durable = await manager.resume(thread, run, user_uuid=handle.user_uuid)
        assert durable is not None
        read = [event_id async for event_id, _ in durable]
        await handle.wait()
    raw = await asyncpg.connect(pg_url)
    try:
        stored = [r["event_id"] for r in await raw.fetch("SELECT event_id FROM run_events")]
    finally:
        await raw.close()

    assert failures == 3
    assert read == list(range(1, handle.last_event_id + 1))
    assert sorted(stored) == read


@pytest.mark.postgres
async def test_the_relay_writes_the_events_of_many_runs_in_one_statement(
    pg_url: str, pg_store: Store
) -> None:
    runs, before_pause = 10, 5
    owner = uuid.uuid4()

    def build(inner: ScriptedAgent) -> StorageAgent:
        return StorageAgent("assistant", owner, pg_store, pg_store, inner)

    manager = DistributedRunManager(
        build,
        store=pg_store,
        relay_flush_interval=3600.0,  # only a full batch or a run's end is written
        relay_batch_size=runs * before_pause,  # every run's first events, exactly
    )
    assert manager.relay is not None
    writer = manager.relay.writer
    inners = []
    async with manager:
        for index in range(runs):
            thread, run = f"thread-{index}", f"run-{index}"
            script = [run_started(thread, run), *text_message("a1", "hello", deltas=5)]
            inner = ScriptedAgent([*script, run_finished(thread, run)], pause_after=before_pause)
            inners.append(inner)
            await manager.run(run_input(thread, run, []), inner)
        async with asyncio.timeout(WAIT_LIMIT):
            for inner in inners:
                await inner.paused.wait()
            while writer.statements == 0:
                await asyncio.sleep(0.01)  # a guard for the writer's turn, not a measurement
        raw = await asyncpg.connect(pg_url)
        try:
            stored = await raw.fetchval("SELECT count(*) FROM run_events")
        finally:
            await raw.close()
        shared = writer.statements
        for inner in inners:
            inner.gate.set()

    assert (shared, stored) == (1, runs * before_pause)


@pytest.mark.postgres
async def test_a_relayed_event_is_serialized_once_for_the_relay_and_the_client(
    pg_url: str, pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from threadstore.agui import _run_handle as handle_module

    serialized: list[str] = []

    def counting(event: Any) -> str:
        text = real(event)
        serialized.append(text)
        return text

    real = handle_module.event_json
    monkeypatch.setattr(handle_module, "event_json", counting)
    thread, run = "thread-once", "run-once"
    script = [run_started(thread, run), *text_message("a1", "x" * 300, deltas=30)]
    script.append(run_finished(thread, run))
    manager = DistributedRunManager(storage_factory(pg_store, script, uuid.uuid4()), store=pg_store)
    async with manager:
        handle = await manager.run(run_input(thread, run, [user("u1")]))
        # The client's stream, as POST /agui reads it: each event's JSON from the handle.
        client = [handle.json_of(n, e) async for n, e in handle.numbered_events()]
        await handle.wait()
    raw = await asyncpg.connect(pg_url)
    try:
        stored = await raw.fetch("SELECT event_id, event::text FROM run_events ORDER BY event_id")
    finally:
        await raw.close()

    assert len(client) == handle.last_event_id == len(serialized)  # once per event, not twice
    assert [json.loads(row["event"]) for row in stored] == [json.loads(t) for t in client]
