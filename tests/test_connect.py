"""Connecting to a thread, without HTTP: what a client is sent, as AG-UI events.

The thread connector (``threadstore.agui.ThreadConnector``) and the hydrations it builds
decide the events; the server only encodes them. These tests read those events directly,
from a real SQLite store written by real runs of a storage agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from ag_ui.core import (
    BaseEvent,
    EventType,
    MessagesSnapshotEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageStartEvent,
    RunStartedEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)

import threadstore
from agui_scripts import (
    ScriptedAgent,
    collect,
    full_turn,
    run_finished,
    run_input,
    run_started,
    state_delta,
    state_snapshot,
    text_message,
    user,
)
from threadstore import Store
from threadstore.agui import DistributedRunManager, StorageAgent
from threadstore.agui.connect import ThreadConnector, before_run, idle_hydration, run_hydration
from threadstore.codec import TRANSLATION, translate_messages
from threadstore.models import Chat, Message, Role
from threadstore.store import HistoryView

USER = UUID("00000000-0000-4000-8000-00000000c0c0")
THREAD = "thread-connect"


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[Store]:
    """An open SQLite store on a file of its own."""
    store = await threadstore.open_store("sqlite:///" + str(tmp_path / "threadstore.db"))
    try:
        yield store
    finally:
        await store.close()


async def _run(store: Store, run_id: str, question: str, script: list[BaseEvent]) -> None:
    """Run ``script`` to its end through a storage agent, as run ``run_id`` of the thread."""
    agent = StorageAgent("assistant", USER, store, store, ScriptedAgent(script))
    given = [user(f"{run_id}-question", question)]
    await collect(agent.run(run_input(THREAD, run_id, given)))


async def _chat_and_history(store: Store) -> tuple[Chat, HistoryView]:
    chat = await store.get_chat_by_thread_id(USER, THREAD)
    assert chat is not None
    return chat, await store.messages.read_history(chat.chat_uuid, TRANSLATION)


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)


def _types(events: Sequence[tuple[int | None, BaseEvent]]) -> list[str]:
    return [str(event.type.value) for _, event in events]


def _dumped(messages: Sequence[Any]) -> list[dict[str, Any]]:
    return [message.model_dump(by_alias=True, exclude_none=True) for message in messages]


async def test_an_idle_thread_gets_its_history_and_state_as_one_finished_run(
    sqlite_store: Store,
) -> None:
    await _run(sqlite_store, "run-1", "Weather in Paris?", full_turn(THREAD, "run-1"))
    chat, history = await _chat_and_history(sqlite_store)
    stored = await sqlite_store.get_chat_messages(chat.chat_uuid)

    manager = DistributedRunManager(lambda: None, store=sqlite_store)
    async with manager:
        connection = await ThreadConnector(manager, sqlite_store).connect(USER, THREAD)
        nowhere = await ThreadConnector(manager, sqlite_store).connect(USER, "no-such-thread")

    assert nowhere is None
    assert connection is not None
    assert connection.events.stream is None and connection.events.reopen is None
    events = connection.hydration.events()
    assert _types(events) == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "STATE_SNAPSHOT",
        "RUN_FINISHED",
    ]
    # Made for the connection: no event of it is a run's numbered event.
    assert [event_id for event_id, _ in events] == [None, None, None, None]
    started, finished = events[0][1], events[3][1]
    assert isinstance(started, RunStartedEvent) and started.thread_id == THREAD
    assert started.run_id.startswith("connect-")
    assert getattr(finished, "run_id", None) == started.run_id
    snapshot = events[1][1]
    assert isinstance(snapshot, MessagesSnapshotEvent)
    assert _dumped(snapshot.messages) == _dumped(translate_messages(stored))
    assert [m.id for m in snapshot.messages][:2] == ["run-1-question", "run-1-reasoning"]
    state = events[2][1]
    assert isinstance(state, StateSnapshotEvent)
    assert state.snapshot == chat.state == {"city": "Paris", "temp": 21}

    # The pure hydration says the same, with a run id of its own.
    again = await idle_hydration(THREAD, chat, history)
    assert _dumped(again.messages) == _dumped(snapshot.messages)
    assert again.state.snapshot == state.snapshot


def _live_script(thread_id: str, run_id: str) -> list[BaseEvent]:
    """A run that has, when paused after event 11, streamed part of each kind of message."""
    return [
        run_started(thread_id, run_id),  # 1
        state_delta({"op": "add", "path": "/early", "value": True}),  # 2: before the snapshot
        TextMessageStartEvent(message_id="answer", role="assistant"),  # 3
        TextMessageContentEvent(message_id="answer", delta="Let me look."),  # 4
        TextMessageEndEvent(message_id="answer"),  # 5
        ReasoningMessageStartEvent(message_id="thought", role="reasoning"),  # 6
        ReasoningMessageContentEvent(message_id="thought", delta="Which city?"),  # 7
        ToolCallStartEvent(tool_call_id="call", tool_call_name="lookup"),  # 8: no parent
        ToolCallArgsEvent(tool_call_id="call", delta="{}"),  # 9
        state_snapshot({"city": "Lyon"}),  # 10: the run's own snapshot
        state_delta({"op": "add", "path": "/late", "value": 1}),  # 11: after it
        # paused here
        ToolCallEndEvent(tool_call_id="call"),
        *text_message("closing", "Done."),
        run_finished(thread_id, run_id),
    ]


async def test_a_live_runs_replayed_events_rebuild_what_they_touch_and_skip_early_deltas(
    sqlite_store: Store,
) -> None:
    await _run(sqlite_store, "run-1", "Weather in Paris?", full_turn(THREAD, "run-1"))
    chat, _ = await _chat_and_history(sqlite_store)
    earlier = _dumped(translate_messages(await sqlite_store.get_chat_messages(chat.chat_uuid)))
    script = _live_script(THREAD, "run-2")
    scripted = ScriptedAgent(script, pause_after=11)
    question = user("run-2-question", "And Lyon?")

    def build() -> StorageAgent:
        return StorageAgent("assistant", USER, sqlite_store, sqlite_store, scripted)

    async with DistributedRunManager(build, store=sqlite_store) as manager:
        handle = await manager.run(run_input(THREAD, "run-2", [question]))
        await asyncio.wait_for(scripted.paused.wait(), 10)
        await asyncio.wait_for(_until(lambda: handle.last_event_id == 11), 10)
        connection = await ThreadConnector(manager, sqlite_store).connect(USER, THREAD)
        assert connection is not None
        scripted.gate.set()
        events = connection.events
        assert events.after == 11 and events.reopen is not None
        rest = await events.reopen(events.after)
        assert rest is not None
        after = [
            (first + offset, event)
            async for first, batch in rest
            for offset, event in enumerate(batch)
        ]
        await handle.wait()
    chat, _ = await _chat_and_history(sqlite_store)

    hydration = connection.hydration
    # The run's own RUN_STARTED leads, with its number.
    assert [(i, e.type) for i, e in hydration.lead] == [(1, EventType.RUN_STARTED)]
    # The earlier history, the run's input, then what the replayed events open, empty,
    # in the order a client creates them: the text, the reasoning, the call's holder.
    messages = _dumped(hydration.messages)
    assert [(m["id"], m["role"]) for m in messages[-4:]] == [
        ("run-2-question", "user"),
        ("answer", "assistant"),
        ("thought", "reasoning"),
        ("call", "assistant"),
    ]
    assert messages[-3:] == [
        {"id": "answer", "role": "assistant", "content": ""},
        {"id": "thought", "role": "reasoning", "content": ""},
        {"id": "call", "role": "assistant", "toolCalls": []},
    ]
    assert messages[:-4] == earlier
    # The delta from before the run's own STATE_SNAPSHOT is folded into the stored state
    # the snapshot sends; the one after it is replayed.
    assert [i for i, _ in hydration.rest] == [3, 4, 5, 6, 7, 8, 9, 10, 11]
    # And the run's events go on from there, each once.
    assert [i for i, _ in after] == list(range(12, len(script) + 1))
    assert after[-1][1].type == EventType.RUN_FINISHED
    assert chat.state == {"city": "Lyon", "late": 1}


async def test_a_live_runs_hydration_drops_a_delta_before_its_own_snapshot(
    sqlite_store: Store,
) -> None:
    await _run(sqlite_store, "run-1", "Weather in Paris?", full_turn(THREAD, "run-1"))
    chat, history = await _chat_and_history(sqlite_store)
    script = _live_script(THREAD, "run-2")
    head = list(enumerate(script[:11], 1))

    hydration = await run_hydration(chat, history, "run-2", head)

    assert hydration.state.snapshot == chat.state
    replayed = [event.type for _, event in hydration.rest]
    assert replayed[0] == EventType.TEXT_MESSAGE_START  # event 2, the early delta, is gone
    assert replayed.count(EventType.STATE_DELTA) == 1
    assert replayed.index(EventType.STATE_SNAPSHOT) < replayed.index(EventType.STATE_DELTA)
    # Before the run's own snapshot no delta is replayed at all, however many there are.
    early = [*script[:2], script[1], *script[2:11]]
    twice = await run_hydration(chat, history, "run-2", list(enumerate(early, 1)))
    assert [event.type for _, event in twice.rest] == replayed


async def test_a_runs_own_records_but_not_its_input_are_left_to_its_events(
    sqlite_store: Store,
) -> None:
    await _run(sqlite_store, "run-1", "Weather in Paris?", full_turn(THREAD, "run-1"))
    await _run(sqlite_store, "run-2", "And in Lyon?", full_turn(THREAD, "run-2"))
    chat, history = await _chat_and_history(sqlite_store)
    runs = [(m.run_id, m.role) for m in history]
    assert ("run-2", Role.USER) in runs and ("run-2", Role.ASSISTANT) in runs

    # The run's records end the branch: a prefix of the kept history, whose kept
    # translation then serves the snapshot.
    kept = before_run(history, "run-2")
    assert isinstance(kept, HistoryView)
    assert [(m.run_id, m.role) for m in kept] == _without_run(history, "run-2")
    assert kept[-1].role == Role.USER and kept[-1].run_id == "run-2"

    # An earlier run's records, with later ones after them, are picked out one by one.
    picked = before_run(list(history), "run-1")
    assert [(m.run_id, m.role) for m in picked] == _without_run(history, "run-1")
    assert ("run-1", Role.USER) in [(m.run_id, m.role) for m in picked]

    # The snapshot of a rejoin with no events yet holds the history up to the run's input.
    hydration = await run_hydration(chat, history, "run-2", [])
    assert hydration.lead == [] and hydration.rest == []
    assert _dumped(hydration.messages) == _dumped(translate_messages(list(kept)))
    assert hydration.messages[-1].id == "run-2-question"


def _without_run(history: Sequence[Message], run_id: str) -> list[tuple[str | None, Role]]:
    return [(m.run_id, m.role) for m in history if m.run_id != run_id or m.role == Role.USER]
