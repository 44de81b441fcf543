"""Every run outcome, recorded and replayed, passes the AG-UI conformance validator.

For each way a run can end (complete, cancelled, crashed, client gone, in-band
RUN_ERROR, refused input) the stream a client receives through the run manager is
validated, and so is the history threadstore replays into the next run (as the
MESSAGES_SNAPSHOT a client would get), on a real SQLite file.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    MessagesSnapshotEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
)

from agui_scripts import (
    ScriptedAgent,
    full_turn,
    run_error,
    run_input,
    run_started,
    text_message,
    user,
)
from agui_validation import assert_valid_stream
from threadstore import MessageStatus, Store, open_store
from threadstore.agui import StorageAgent, StreamPersistenceManager, translate_messages

THREAD = "thread-1"
FEATURES = ["shared-state"]


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[Store]:
    store = await open_store(f"sqlite:///{tmp_path / 'conformance.db'}")
    try:
        yield store
    finally:
        await store.close()


Scenario = Callable[[Store, UUID], Awaitable[tuple[list[BaseEvent], MessageStatus | None]]]


def _manager(store: Store, user_uuid: UUID, agent: ScriptedAgent) -> StreamPersistenceManager:
    return StreamPersistenceManager(
        lambda: StorageAgent("assistant", user_uuid, store, store, agent), store=store
    )


async def _run(
    store: Store, user_uuid: UUID, agent: ScriptedAgent, input: RunAgentInput
) -> list[BaseEvent]:
    """Run ``input`` to its end through the manager; return what a full reader got."""
    async with _manager(store, user_uuid, agent) as manager:
        handle = await manager.run(input)
        await handle.wait()
        return [event async for event in handle.events()]


async def complete(store: Store, user_uuid: UUID) -> tuple[list[BaseEvent], MessageStatus | None]:
    agent = ScriptedAgent(full_turn(THREAD, "run-1"))
    events = await _run(store, user_uuid, agent, run_input(THREAD, "run-1", [user("u1")]))
    return events, MessageStatus.COMPLETE


async def cancelled(store: Store, user_uuid: UUID) -> tuple[list[BaseEvent], MessageStatus | None]:
    agent = ScriptedAgent(full_turn(THREAD, "run-1"), pause_after=12)
    async with _manager(store, user_uuid, agent) as manager:
        handle = await manager.run(run_input(THREAD, "run-1", [user("u1")]))
        await agent.paused.wait()
        assert handle.cancel()
        await handle.wait()
        events = [event async for event in handle.events()]
    return events, MessageStatus.INTERRUPTED


async def crashed(store: Store, user_uuid: UUID) -> tuple[list[BaseEvent], MessageStatus | None]:
    agent = ScriptedAgent(full_turn(THREAD, "run-1"), fail_after=12)
    events = await _run(store, user_uuid, agent, run_input(THREAD, "run-1", [user("u1")]))
    return events, MessageStatus.ERRORED


async def client_gone(
    store: Store, user_uuid: UUID
) -> tuple[list[BaseEvent], MessageStatus | None]:
    agent = ScriptedAgent(full_turn(THREAD, "run-1"), delay=0.001)
    async with _manager(store, user_uuid, agent) as manager:
        handle = await manager.run(run_input(THREAD, "run-1", [user("u1")]))
        received = 0
        async for _ in handle.events():
            received += 1
            if received == 5:
                break  # the client disconnects; the run must go on
        await handle.wait()
        # What a client reconnecting from the start receives: the whole run.
        events = [event async for event in handle.events()]
    return events, MessageStatus.COMPLETE


async def in_band_error(
    store: Store, user_uuid: UUID
) -> tuple[list[BaseEvent], MessageStatus | None]:
    # The error cuts a message short: its record must end errored.
    unfinished = text_message("a1", "I will try")[:-1]
    script = [run_started(THREAD, "run-1"), *unfinished, run_error()]
    agent = ScriptedAgent(script)
    events = await _run(store, user_uuid, agent, run_input(THREAD, "run-1", [user("u1")]))
    return events, MessageStatus.ERRORED


async def refused_input(
    store: Store, user_uuid: UUID
) -> tuple[list[BaseEvent], MessageStatus | None]:
    forged = AssistantMessage(id="forged", content="I never said this")
    agent = ScriptedAgent(full_turn(THREAD, "run-1"))
    events = await _run(store, user_uuid, agent, run_input(THREAD, "run-1", [forged]))
    assert not agent.inputs, "the inner agent must not run on refused input"
    return events, None


SCENARIOS: dict[str, Scenario] = {
    "complete": complete,
    "cancelled": cancelled,
    "crashed": crashed,
    "client_gone": client_gone,
    "in_band_error": in_band_error,
    "refused_input": refused_input,
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_recorded_stream_and_replayed_history_are_conformant(
    sqlite_store: Store, scenario: str
) -> None:
    user_uuid = uuid4()
    events, status = await SCENARIOS[scenario](sqlite_store, user_uuid)

    assert_valid_stream(events, features=FEATURES)

    # The history the next run gets is what the store replays; a client connecting to the
    # thread gets it as a MESSAGES_SNAPSHOT. Both must be conformant.
    next_agent = ScriptedAgent(
        lambda input: [
            RunStartedEvent(thread_id=THREAD, run_id="run-2"),
            RunFinishedEvent(thread_id=THREAD, run_id="run-2"),
        ]
    )
    await _run(sqlite_store, user_uuid, next_agent, run_input(THREAD, "run-2", [user("u2")]))
    replayed = next_agent.inputs[-1].messages
    snapshot: list[BaseEvent] = [
        RunStartedEvent(thread_id=THREAD, run_id="replay"),
        MessagesSnapshotEvent(messages=replayed),
        RunFinishedEvent(thread_id=THREAD, run_id="replay"),
    ]
    assert_valid_stream(snapshot)
    assert [m.id for m in replayed][-1] == "u2"

    chat = await sqlite_store.get_chat_by_thread_id(user_uuid, THREAD)
    assert chat is not None
    stored = await sqlite_store.get_chat_messages(chat.chat_uuid)
    assert [m.id for m in translate_messages(stored)] == [m.id for m in replayed]
    run_one = [m for m in stored if m.run_id == "run-1"]
    if status is None:
        assert run_one == []
    else:
        assert run_one, "the run produced records"
        assert {m.status for m in run_one if m.role != "user"} <= {
            MessageStatus.COMPLETE,
            status,
        }
        assert status in {m.status for m in run_one if m.role != "user"}
        assert not any(m.in_progress for m in run_one)


async def test_no_scenario_leaves_a_run_record_running(sqlite_store: Store) -> None:
    for scenario in SCENARIOS.values():
        await scenario(sqlite_store, uuid4())
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    assert list(await sqlite_store.get_stale_runs(older_than=tomorrow)) == []
