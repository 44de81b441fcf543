"""Long chats: a run on a chat with a long history writes and reads as on a short one."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import ag_ui.core
import httpx
import pytest

from agui_scripts import (
    ScriptedAgent,
    StoreSpy,
    collect,
    full_turn,
    run_finished,
    run_input,
    run_started,
    tool_call,
    user,
)
from postgres_support import clean_database, server_url
from server_support import LiveServer, collect_sse
from sqlite_support import sqlite_store
from threadstore import (
    ChatCreate,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    Role,
    Store,
    open_store,
)
from threadstore._steps import OFF_LOOP_ITEMS, STEP_ITEMS, dropped_in_steps
from threadstore.agui import StorageAgent
from threadstore.codec import HistoryTranslator
from threadstore.codec._messages import translate_messages
from threadstore.fold import HistoryIndex
from threadstore.server import DemoAgent, HeaderAuth, create_app
from threadstore.server._routes_agui import messages_snapshot_pieces
from threadstore.server._sse import encode_frame
from threadstore.store.sqlite import SQLiteStore

USER = UUID("00000000-0000-4000-8000-000000000015")


async def append_history(store: Store, chat_uuid: UUID, messages: int) -> None:
    """Append ``messages`` records through the public API: user turns and tool-calling answers."""
    for index in range(messages):
        if index % 2 == 0:
            await store.create_message(
                MessageCreate(
                    chat_uuid=chat_uuid, role=Role.USER, content=f"q{index}", agui_id=f"u{index}"
                )
            )
            continue
        answer = await store.create_message(
            MessageCreate(
                chat_uuid=chat_uuid, role=Role.ASSISTANT, content=f"a{index}", agui_id=f"a{index}"
            )
        )
        await store.create_message_reasoning(
            MessageReasoningCreate(message_uuid=answer.message_uuid, content="thinking")
        )
        call = await store.create_message_tool_call(
            MessageToolCallCreate(
                message_uuid=answer.message_uuid, tool_call_id=f"call{index}", name="f"
            )
        )
        await store.update_message_tool_call(
            call.uuid, MessageToolCallUpdate(content="done", status=MessageStatus.COMPLETE)
        )


def storage_agent(repo: object, run_id: str) -> StorageAgent:
    inner = ScriptedAgent(lambda input: full_turn("long", input.run_id))
    return StorageAgent("assistant", USER, repo, repo, inner, run_repo=repo, owner=run_id)  # type: ignore[arg-type]


@pytest.mark.parametrize("messages", [0, 1, 10, 300])
async def test_runs_after_a_history_of_appends_never_retry_a_flush_on_a_healthy_store(
    store: Store, messages: int
) -> None:
    chat = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="long"))
    await append_history(store, chat.chat_uuid, messages)

    for run in range(3):
        agent = storage_agent(store, f"run{run}")
        await collect(agent.run(run_input("long", f"run{run}", [user(f"new{run}")])))
        await agent.persisted()

        assert agent.flush_retries == 0
    stored = await store.get_chat_messages(chat.chat_uuid)
    added = stored[messages:]
    assert {f"new{r}" for r in range(3)} | {f"run{r}-a2" for r in range(3)} <= {
        m.agui_id for m in added
    }
    assert all(m.status is MessageStatus.COMPLETE for m in added)


async def test_flush_retries_count_the_writes_a_failing_store_refused(store: Store) -> None:
    spy = StoreSpy(store)
    agent = storage_agent(spy, "flaky")
    agent.retry_base_delay = agent.retry_max_delay = 0.0

    async def fail_from_now(event: object) -> None:
        spy.fail_every = 2  # the run's own writes, once it streams

    await collect(agent.run(run_input("long", "flaky", [user("q")])), fail_from_now)
    await agent.persisted()

    assert agent.flush_retries > 0
    assert agent.chat is not None
    stored = {m.agui_id for m in await store.get_chat_messages(agent.chat.chat_uuid)}
    assert {"q", "flaky-a1", "flaky-a2"} <= stored


class RowCounter:
    """Counts the statements a real store runs and the rows they return (reads and writes)."""

    def __init__(self, store: Store) -> None:
        self.statements = self.rows = 0
        # The backends' own statement helpers, wrapped on this one instance.
        sqlite = isinstance(store, SQLiteStore)
        target: Any = store.executor if isinstance(store, SQLiteStore) else store
        names = ("fetch", "run") if sqlite else ("_fetch_on", "_fetch_planned")
        for name in names:
            setattr(target, name, self._counting(getattr(target, name), name == "run"))

    def _counting(self, method: Callable[..., Awaitable[Any]], batch: bool) -> Any:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            result = await method(*args, **kwargs)
            for rows in result if batch else [result]:
                self.statements += 1
                self.rows += len(rows) if isinstance(rows, list) else 0
            return result

        return counted

    def snapshot(self) -> tuple[int, int]:
        return self.statements, self.rows


@asynccontextmanager
async def sql_store(backend: str, tmp_path: Path) -> AsyncIterator[Store]:
    if backend == "sqlite":
        tmp_path.mkdir()
        async with sqlite_store(tmp_path / "count.db") as store:
            yield store
        return
    async with clean_database(server_url()) as url:
        opened = await open_store(url)
        try:
            yield opened
        finally:
            await opened.close()


SQL_BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


async def _one_run(store: Store, run_id: str) -> StorageAgent:
    agent = storage_agent(store, run_id)
    await collect(agent.run(run_input("long", run_id, [user(f"{run_id}-q")])))
    await agent.persisted()
    return agent


@pytest.mark.usefixtures("quiet_search_indexer")
@pytest.mark.parametrize("backend", SQL_BACKENDS)
async def test_a_run_after_appends_reads_as_many_rows_on_a_long_chat_as_on_a_short_one(
    backend: str, tmp_path: Path
) -> None:
    costs: dict[int, tuple[int, int]] = {}
    for length in (30, 300):
        async with sql_store(backend, tmp_path / str(length)) as store:
            chat = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="long"))
            await append_history(store, chat.chat_uuid, length)
            await _one_run(store, "first")  # reads the whole history once
            await store.create_message(  # and a message from elsewhere meanwhile
                MessageCreate(chat_uuid=chat.chat_uuid, content="from elsewhere", agui_id="x")
            )
            assert store.history_cache is not None
            kept = store.history_cache.entry(chat.chat_uuid)
            counter = RowCounter(store)
            agent = await _one_run(store, "second")
            costs[length] = counter.snapshot()
            # Extended in place, so what was derived from it (its index, its translation)
            # was extended too, not built again.
            assert store.history_cache.entry(chat.chat_uuid) is kept

            # The agent was given the whole history, as before.
            inner = agent.inner_agent
            assert isinstance(inner, ScriptedAgent)
            given = inner.inputs[0].messages
            stored = await store.get_chat_messages(chat.chat_uuid)
            assert [m.id for m in given] == [
                m.id for m in translate_messages([m for m in stored if m.run_id != "second"])
            ] + ["second-q"]
            assert given[0].id == "u0"

    assert costs[30] == costs[300]


async def test_translating_a_long_history_leaves_the_event_loop_free(tmp_path: Path) -> None:
    async with sqlite_store(tmp_path / "loop.db") as store:
        chat = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="long"))
        await append_history(store, chat.chat_uuid, 2 * OFF_LOOP_ITEMS)
        ran_on: list[int] = []

        def translate(messages: Sequence[Message]) -> list[ag_ui.core.Message]:
            ran_on.append(threading.get_ident())
            return translate_messages(messages)

        inner = ScriptedAgent(lambda input: full_turn("long", input.run_id))
        agent = StorageAgent(
            "assistant", USER, store, store, inner, run_repo=store, translate=translate
        )
        await collect(agent.run(run_input("long", "loop", [user("new")])))
        await agent.persisted()

        assert ran_on and threading.get_ident() not in ran_on
        assert inner.inputs[0].messages[-1].id == "new"


async def test_a_snapshot_built_a_message_at_a_time_is_the_one_serialized_whole() -> None:
    messages: list[ag_ui.core.Message] = [
        ag_ui.core.UserMessage(id="u1", content="line\u2028break and é"),
        ag_ui.core.AssistantMessage(
            id="a1",
            tool_calls=[
                ag_ui.core.ToolCall(
                    id="c1", function=ag_ui.core.FunctionCall(name="f", arguments='{"x": 1}')
                )
            ],
        ),
        ag_ui.core.ToolMessage(id="t1", content="done", tool_call_id="c1"),
        *(ag_ui.core.UserMessage(id=f"m{n}", content=f"q{n}") for n in range(2 * OFF_LOOP_ITEMS)),
    ]
    for given in (messages, messages[:3], []):
        pieces = await messages_snapshot_pieces(given)
        frame = b"".join(pieces)
        if len(given) >= OFF_LOOP_ITEMS:  # no piece holds the whole frame
            assert max(len(piece) for piece in pieces) < len(frame) // 4
        whole = encode_frame(ag_ui.core.MessagesSnapshotEvent(messages=given, timestamp=1))
        assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
        assert b"\n" not in frame[:-2] and "\u2028".encode() not in frame  # one line
        built, reference = json.loads(frame[6:]), json.loads(whole[6:])
        assert built.pop("timestamp") > 0 and reference.pop("timestamp") == 1
        assert built == reference


async def test_connecting_to_a_long_chat_translates_only_what_was_appended_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fed: list[int] = []
    feed = HistoryTranslator.feed

    def counted(self: HistoryTranslator, messages: Sequence[Message]) -> None:
        fed.append(len(messages))
        feed(self, messages)

    monkeypatch.setattr(HistoryTranslator, "feed", counted)
    async with sqlite_store(tmp_path / "connect.db") as store:
        chat = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="long"))
        await append_history(store, chat.chat_uuid, 2 * OFF_LOOP_ITEMS)
        app = create_app(store, agent=DemoAgent(), auth=HeaderAuth("X-User"))
        headers = {"X-User": str(USER)}
        async with LiveServer(app) as server, httpx.AsyncClient(headers=headers) as client:
            url = f"{server.url}/agui/threads/long/connect"

            async def snapshot() -> list[dict[str, Any]]:
                async with client.stream("GET", url) as response:
                    frames = await collect_sse(response)
                assert frames[1].type == "MESSAGES_SNAPSHOT" and frames[1].data is not None
                messages: list[dict[str, Any]] = frames[1].data["messages"]
                return messages

            first = await snapshot()
            translated_first = sum(fed)
            fed.clear()
            await store.create_message(
                MessageCreate(chat_uuid=chat.chat_uuid, content="one more", agui_id="late")
            )
            second = await snapshot()
            translated_second = sum(fed)

        stored = await store.get_chat_messages(chat.chat_uuid)
    reference = [m.model_dump(by_alias=True, exclude_none=True) for m in translate_messages(stored)]
    assert second == reference
    assert first == reference[:-1]
    assert translated_first == 2 * OFF_LOOP_ITEMS
    assert translated_second == 1  # the message appended since the first connect, alone


async def test_a_long_list_dropped_in_steps_is_freed_a_step_at_a_time() -> None:
    freed: list[int] = []

    class Node:
        def __del__(self) -> None:
            freed.append(1)

    items: list[Any] = [Node() for _ in range(10 * STEP_ITEMS)]
    seen: list[int] = []
    dropping = asyncio.ensure_future(dropped_in_steps(items))
    while not dropping.done():  # another task of the loop, between the steps
        seen.append(len(freed))
        await asyncio.sleep(0)
    await dropping

    assert items == [] and len(freed) == 10 * STEP_ITEMS
    assert any(0 < count < 10 * STEP_ITEMS for count in seen)  # not all at once
    assert max(b - a for a, b in itertools.pairwise(seen)) <= STEP_ITEMS


@pytest.mark.parametrize("backend", SQL_BACKENDS)
async def test_a_tool_result_for_the_last_answer_rewinds_what_was_kept_instead_of_rebuilding(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A frontend tool: a run ends on a call, the client's next run brings its result.
    def script(input: ag_ui.core.RunAgentInput) -> list[ag_ui.core.BaseEvent]:
        if input.run_id == "ask":
            return [
                run_started("long", "ask"),
                *tool_call("ask-call", "confirm", "{}", parent_message_id="ask-a"),
                run_finished("long", "ask"),
            ]
        return full_turn("long", input.run_id)

    async with sql_store(backend, tmp_path / "db") as store:
        chat = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="long"))
        await append_history(store, chat.chat_uuid, 2 * OFF_LOOP_ITEMS)
        inner = ScriptedAgent(script)

        def agent() -> StorageAgent:
            return StorageAgent("assistant", USER, store, store, inner, run_repo=store)

        asking = agent()
        await collect(asking.run(run_input("long", "ask", [user("ask-q")])))
        await asking.persisted()

        fed: list[int] = []
        for cls in (HistoryTranslator, HistoryIndex):
            feed = cls.feed

            def counted(self: Any, messages: Any, feed: Any = feed) -> None:
                messages = list(messages)
                fed.append(len(messages))
                feed(self, messages)

            monkeypatch.setattr(cls, "feed", counted)
        answer = ag_ui.core.ToolMessage(id="ask-result", tool_call_id="ask-call", content="yes")
        answering = agent()
        await collect(answering.run(run_input("long", "answer", [answer])))
        await answering.persisted()

        # Only the answered message and what came after it were read again.
        assert sum(fed) <= 4
        stored = await store.get_chat_messages(chat.chat_uuid)
        asked = next(m for m in stored if m.agui_id == "ask-a")
        assert [call.content for call in asked.tool_calls] == ["yes"]
        given = inner.inputs[-1].messages
        reference = translate_messages([m for m in stored if m.run_id != "answer"])
        assert [m.model_dump() for m in given] == [m.model_dump() for m in reference]
        assert given[-1].id == "ask-result" and given[-1].content == "yes"
