"""A run starts before its set-up writes: RUN_STARTED waits for no write, nothing is lost.

A storage agent whose input only adds messages (no tool results, no branch) on a
``Store`` with the default translation gives the inner agent what the history will be
once the input is stored, and starts it while the set-up writes (the chat, the run
record, the input) go on. The inner agent's ``RUN_STARTED`` reaches the client at once;
every later event waits for the writes. What the inner agent is given must be exactly
what the stored history translates to (the reference path, checked here on random
conversations), and a run that ends before its writes do must still be finalized.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from ag_ui.core import (
    BaseEvent,
    ImageInputContent,
    InputContentUrlSource,
    RunAgentInput,
    TextInputContent,
    UserMessage,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agui_scripts import (
    ScriptedAgent,
    collect,
    reasoning,
    run_finished,
    run_input,
    run_started,
    text_message,
    tool_call,
    user,
)
from server_support import collect_sse, served_with_store
from server_support import run_input as server_run_input
from threadstore import Store
from threadstore.agui import HistoryWindow, StorageAgent, translate_messages
from threadstore.errors import StoreError
from threadstore.models import Role, RunStatus
from threadstore.store._groups import Chats, Runs
from threadstore.store.sqlite import SQLiteStore

USER = UUID(int=31)


def answer(run: RunAgentInput) -> list[BaseEvent]:
    return [
        run_started(run.thread_id, run.run_id),
        *text_message(f"{run.run_id}-a", "Hi!"),
        run_finished(run.thread_id, run.run_id),
    ]


class Gate:
    """Holds one store method until released; ``entered`` is set once a call waits in it."""

    def __init__(self, store: Any, name: str, *, error: Exception | None = None) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.error = error
        method = getattr(store, name)

        async def gated(*args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            await self.release.wait()
            if self.error is not None:
                raise self.error
            return await method(*args, **kwargs)

        setattr(store, name, gated)


async def turns(count: int = 20) -> None:
    """Let the loop run ``count`` times: a held write does not finish in any of them."""
    for _ in range(count):
        await asyncio.sleep(0)


def storage_agent(store: Store, script: Any = answer, **options: Any) -> StorageAgent:
    return StorageAgent(
        "assistant", USER, store, store, ScriptedAgent(script), run_repo=store, **options
    )


@pytest.mark.parametrize("thread", ["new", "existing"])
async def test_run_started_reaches_the_client_before_the_set_up_writes(
    store: Store, thread: str
) -> None:
    if thread == "existing":
        await collect(storage_agent(store).run(run_input("t", "r0", [user("u0", "Before.")])))
    # A new thread's set-up is one write (open_chat); an existing one's starts with its run.
    gate = Gate(store.chats, "open_chat") if thread == "new" else Gate(store, "start_run")
    agent = storage_agent(store)
    events = agent.run(run_input("t", "r1", [user("u1", "Hello?")]))

    first = await anext(events)
    assert first.type == "RUN_STARTED"
    await gate.entered.wait()
    # The client has RUN_STARTED and the inner agent its history; nothing is written yet.
    assert [m.id for m in agent.inner_agent.inputs[0].messages][-1] == "u1"  # type: ignore[attr-defined]
    chat = await store.get_chat_by_thread_id(USER, "t")
    if chat is not None:
        assert await store.get_run(chat.chat_uuid, "r1") is None
    following = asyncio.ensure_future(anext(events))
    await turns()
    assert not following.done()  # every later event waits for the writes

    gate.release.set()
    assert (await following).type == "TEXT_MESSAGE_START"
    rest = [event async for event in events]
    assert rest[-1].type == "RUN_FINISHED"
    chat = await store.get_chat_by_thread_id(USER, "t")
    assert chat is not None
    run = await store.get_run(chat.chat_uuid, "r1")
    assert run is not None and run.status == RunStatus.COMPLETE
    contents = [m.content for m in await store.get_chat_messages(chat.chat_uuid)]
    assert contents[-2:] == ["Hello?", "Hi!"]


async def test_a_run_closed_before_its_writes_end_is_finalized_once_they_do(
    store: Store,
) -> None:
    await collect(storage_agent(store).run(run_input("t", "r0", [user("u0", "Before.")])))
    gate = Gate(store, "start_run")
    agent = storage_agent(store)
    events = agent.run(run_input("t", "r1", [user("u1", "Hello?")]))
    assert (await anext(events)).type == "RUN_STARTED"
    await gate.entered.wait()

    # The client goes away while the run record is still being written.
    closing = asyncio.ensure_future(events.aclose())
    await turns()
    assert not closing.done()  # the close waits for the writes it must finalize
    gate.release.set()
    await closing

    chat = await store.get_chat_by_thread_id(USER, "t")
    assert chat is not None
    run = await store.get_run(chat.chat_uuid, "r1")
    assert run is not None and run.status == RunStatus.INTERRUPTED
    assert agent.inner_agent.closed  # type: ignore[attr-defined]
    assert "Hello?" in [m.content for m in await store.get_chat_messages(chat.chat_uuid)]


async def test_set_up_writes_that_fail_after_run_started_fail_the_run_and_hold_nothing(
    store: Store,
) -> None:
    gate = Gate(store.chats, "open_chat", error=StoreError("the disk is full"))
    agent = storage_agent(store)
    events = agent.run(run_input("t", "r1", [user("u1", "Hello?")]))
    assert (await anext(events)).type == "RUN_STARTED"
    gate.release.set()

    with pytest.raises(StoreError, match="the disk is full"):
        await anext(events)
    assert agent.inner_agent.closed  # type: ignore[attr-defined]
    assert await store.get_chat_by_thread_id(USER, "t") is None
    # The thread is free: the next run on it sets up and completes.
    gate.error = None
    done = await collect(storage_agent(store).run(run_input("t", "r2", [user("u2", "Again?")])))
    assert done[-1].type == "RUN_FINISHED"


# --- what the inner agent is given: the early start against the stored history ---------

# Ids the first runs' answers store (an answer, a reasoning step, a tool result) among them.
_ids = st.sampled_from(["m1", "m2", "shared", "a-r0", "think-r0-1", "c-r0-2-result"])
# PostgreSQL stores no NUL in text (the server refuses one up front: test_server_edge).
_text = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12
)


@st.composite
def _inbound(draw: st.DrawFn) -> list[UserMessage]:
    """New user messages, their ids drawn from a pool that collides with stored records'."""
    messages = []
    for index in range(draw(st.integers(1, 3))):
        content: Any = draw(_text)
        if draw(st.booleans()):
            content = [
                TextInputContent(text=draw(_text)),
                ImageInputContent(
                    source=InputContentUrlSource(
                        value="https://example.com/a.png", mime_type="image/png"
                    )
                ),
            ]
        message_id = draw(st.one_of(_ids, st.just(f"fresh-{index}-{uuid4().hex[:6]}")))
        name = draw(st.none() | st.just("ann"))
        messages.append(UserMessage(id=message_id, content=content, name=name))
    return messages


def _answer_kinds() -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(["text", "reasoning", "tool"]), min_size=1, max_size=3)


def _script(kinds: list[str]) -> Callable[[RunAgentInput], list[BaseEvent]]:
    def script(run: RunAgentInput) -> list[BaseEvent]:
        events: list[BaseEvent] = [run_started(run.thread_id, run.run_id)]
        for index, kind in enumerate(kinds):
            message_id = f"a-{run.run_id}" if index == 0 else f"a-{run.run_id}-{index}"
            if kind == "text":
                events += text_message(message_id, f"Answer {index}.")
            elif kind == "reasoning":
                events += reasoning(f"think-{run.run_id}-{index}", "Let me see.")
                events += text_message(message_id, "Seen.")
            else:
                events += text_message(message_id, "Looking.")
                events += tool_call(
                    f"c-{run.run_id}-{index}",
                    "lookup",
                    "{}",
                    parent_message_id=message_id,
                    result="found",
                )
        return [*events, run_finished(run.thread_id, run.run_id)]

    return script


def _dump(messages: Any) -> list[dict[str, Any]]:
    return [message.model_dump() for message in messages]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    runs=st.lists(st.tuples(_inbound(), _answer_kinds()), min_size=1, max_size=3),
    window=st.none() | st.builds(HistoryWindow, max_turns=st.integers(1, 2)),
)
async def test_an_early_start_gives_the_agent_what_the_stored_history_translates_to(
    store: Store, runs: list[tuple[list[UserMessage], list[str]]], window: HistoryWindow | None
) -> None:
    thread = f"t-{uuid4().hex[:8]}"
    for number, (inbound, kinds) in enumerate(runs):
        started_early: list[bool] = []
        agents: list[StorageAgent] = []

        def watched(
            run: RunAgentInput,
            kinds: list[str] = kinds,
            started_early: list[bool] = started_early,
            agents: list[StorageAgent] = agents,
        ) -> list[BaseEvent]:
            # Early: the inner agent starts before the set-up has written the chat's run.
            started_early.append(agents[0].chat is None)
            return _script(kinds)(run)

        agent = storage_agent(store, watched, history_window=window)
        agents.append(agent)
        run = run_input(thread, f"r{number}", list(inbound))
        events = await collect(agent.run(run))
        assert events[-1].type == "RUN_FINISHED"
        assert agent.chat is not None
        record = await store.get_run(agent.chat.chat_uuid, run.run_id)
        assert record is not None
        # Only a run that branches (its input echoes a stored answer that is not the
        # leaf; its run is not exclusive) waits for its writes.
        assert started_early == [record.exclusive]
        # The reference: the stored history up to this run's input (an echoed id is not
        # stored again), translated.
        stored = await store.get_chat_messages(agent.chat.chat_uuid)
        before = [m for m in stored if m.role is Role.USER or m.run_id != run.run_id]
        reference = before if window is None else window.select(before)
        given = agent.inner_agent.inputs[0].messages  # type: ignore[attr-defined]
        assert _dump(given) == _dump(translate_messages(reference))


# --- through the server: what a POST reads before the agent starts ---------------------


async def test_a_post_reads_its_threads_chat_once_before_the_agent_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []  # the store's chat and run reads, in the server's thread too

    def counted(owner: type, name: str) -> None:
        original = getattr(owner, name)

        async def read(self: Any, *args: Any, **kwargs: Any) -> Any:
            reads.append(name)
            return await original(self, *args, **kwargs)

        monkeypatch.setattr(owner, name, read)

    for owner, name in (
        (SQLiteStore, "get_chat_by_thread_id"),
        (Chats, "get_chat"),
        (SQLiteStore, "get_run"),
        (Runs, "get_running_runs"),
    ):
        counted(owner, name)
    before_start: list[list[str]] = []

    def script(run: RunAgentInput) -> list[BaseEvent]:
        before_start.append(list(reads))
        reads.clear()
        return answer(run)

    async with served_with_store(f"sqlite:///{tmp_path / 'reads.db'}", ScriptedAgent(script)) as (
        client,
        _,
    ):
        first = server_run_input("First.")
        second = server_run_input("Second.", thread_id=first["threadId"])
        for body in (first, second):
            async with client.stream("POST", "/agui", json=body) as response:
                assert (await collect_sse(response))[-1].type == "RUN_FINISHED"
            reads.clear()

    # A new thread: its chat is looked up once (the run gate's look-up serves the run's
    # set-up); an existing one: once, then its run records (this run id's and the running
    # ones, in one read).
    assert before_start == [
        ["get_chat_by_thread_id"],
        ["get_chat_by_thread_id", "get_running_runs"],
    ]
