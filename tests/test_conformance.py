"""Every run outcome, recorded and replayed, passes the AG-UI conformance validator.

For each way a run can end (complete, cancelled, crashed, client gone, in-band
RUN_ERROR, refused input) the stream a client receives through the run manager is
validated, and so is the history threadstore replays into the next run (as the
MESSAGES_SNAPSHOT a client would get), on a real SQLite file. A sub-agent's call left
without a result replays answered, on every backend, as chat-completions providers
require.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    MessagesSnapshotEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
)

from agui_scripts import (
    ScriptedAgent,
    collect,
    full_turn,
    run_error,
    run_finished,
    run_input,
    run_started,
    text_message,
    tool_call,
    user,
)
from agui_validation import assert_valid_stream
from threadstore import MessageStatus, Store, open_store
from threadstore.agui import StorageAgent, StreamPersistenceManager, translate_messages
from threadstore.codec._messages import SUBAGENT_NO_RESULT_ERROR
from threadstore.server._openai_agent import to_openai_messages

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


def sub_agent_call_without_result(ending: str) -> list[BaseEvent]:
    """A run whose sub-agent makes a tool call that never gets a result.

    The agent delegates through its own call ``delegate``; the sub-agent says a word and
    calls ``search``; then the sub-agent finishes or fails before the agent answers.
    """
    sub = "sub-1"
    events: list[BaseEvent] = [
        run_started("sub-thread", "run-1"),
        *text_message("a-1", "Let me delegate."),
        *tool_call("delegate", "research", '{"topic": "tides"}', parent_message_id="a-1"),
        SubagentStartedEvent(
            subagent_run_id=sub, name="researcher", parent_tool_call_id="delegate"
        ),
        TextMessageStartEvent(message_id="s-1", subagent_run_id=sub),
        TextMessageContentEvent(message_id="s-1", delta="Searching.", subagent_run_id=sub),
        TextMessageEndEvent(message_id="s-1", subagent_run_id=sub),
        ToolCallStartEvent(
            tool_call_id="search",
            tool_call_name="search",
            parent_message_id="s-1",
            subagent_run_id=sub,
        ),
        ToolCallArgsEvent(tool_call_id="search", delta='{"q": "tides"}', subagent_run_id=sub),
        ToolCallEndEvent(tool_call_id="search", subagent_run_id=sub),
    ]
    if ending == "finished":
        events.append(SubagentFinishedEvent(subagent_run_id=sub))
    elif ending == "errored":
        events.append(SubagentErrorEvent(subagent_run_id=sub, message="quota", code="LIMIT"))
    events += [
        ToolCallResultEvent(
            message_id="delegate-result", tool_call_id="delegate", content="Tides follow the moon."
        ),
        *text_message("a-2", "Here is what I know."),
        run_finished("sub-thread", "run-1"),
    ]
    return events


def assert_every_call_answered(messages: list[dict[str, Any]]) -> None:
    """The chat-completions rule: an assistant message's tool calls are each answered by
    the tool messages that directly follow it."""
    for index, message in enumerate(messages):
        calls = [call["id"] for call in message.get("tool_calls") or ()]
        following = messages[index + 1 : index + 1 + len(calls)]
        answered = [m.get("tool_call_id") for m in following if m["role"] == "tool"]
        assert sorted(answered) == sorted(calls), (index, messages)
    answered_ids = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    made = [call["id"] for m in messages for call in m.get("tool_calls") or ()]
    assert sorted(answered_ids) == sorted(made), messages


@pytest.mark.parametrize("ending", ["finished", "errored"])
async def test_a_sub_agent_call_without_a_result_replays_answered_with_an_error(
    store: Store, ending: str
) -> None:
    recorded = sub_agent_call_without_result(ending)
    assert_valid_stream(recorded)
    user_uuid = uuid4()
    first = StorageAgent(
        "assistant", user_uuid, store, store, ScriptedAgent(recorded), run_repo=store
    )
    await collect(first.run(run_input("sub-thread", "run-1", [user("u1", "Tides?")])))

    inner = ScriptedAgent(
        [
            RunStartedEvent(thread_id="sub-thread", run_id="run-2"),
            run_finished("sub-thread", "run-2"),
        ]
    )
    second = StorageAgent("assistant", user_uuid, store, store, inner, run_repo=store)
    await collect(second.run(run_input("sub-thread", "run-2", [user("u2", "More?")])))
    given = inner.inputs[0]

    # The provider-facing history: every call followed by its result.
    assert_every_call_answered(to_openai_messages(given))
    (answer,) = [
        m for m in given.messages if isinstance(m, ToolMessage) and m.tool_call_id == "search"
    ]
    assert (answer.content, answer.error, answer.subagent_run_id) == (
        "",
        SUBAGENT_NO_RESULT_ERROR,
        "sub-1",
    )
    # The agent's own call replays its result, as before.
    results = [(m.tool_call_id, m.content) for m in given.messages if isinstance(m, ToolMessage)]
    assert results == [("delegate", "Tides follow the moon."), ("search", "")]
    snapshot: list[BaseEvent] = [
        RunStartedEvent(thread_id="sub-thread", run_id="replay"),
        MessagesSnapshotEvent(messages=given.messages),
        RunFinishedEvent(thread_id="sub-thread", run_id="replay"),
    ]
    assert_valid_stream(snapshot)
    # Echoed back by a client, the replayed answer is known history: nothing is stored.
    chat = await store.get_chat_by_thread_id(user_uuid, "sub-thread")
    assert chat is not None
    before = await store.get_chat_messages(chat.chat_uuid)
    echo = ScriptedAgent(
        [
            RunStartedEvent(thread_id="sub-thread", run_id="run-3"),
            run_finished("sub-thread", "run-3"),
        ]
    )
    third = StorageAgent("assistant", user_uuid, store, store, echo, run_repo=store)
    await collect(third.run(run_input("sub-thread", "run-3", [*given.messages])))
    after = await store.get_chat_messages(chat.chat_uuid)
    assert [(m.message_uuid, m.tool_calls) for m in after] == [
        (m.message_uuid, m.tool_calls) for m in before
    ]
