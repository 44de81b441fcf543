"""Long chats: a run on a chat with a long history writes and reads as on a short one."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from pathlib import Path
from uuid import UUID

import ag_ui.core
import pytest

from agui_scripts import ScriptedAgent, StoreSpy, collect, full_turn, run_input, user
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
)
from threadstore.agui import StorageAgent
from threadstore.codec.messages import translate_messages
from threadstore.store.base import BranchPage
from threadstore.store.offload import OFF_LOOP_ITEMS
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


@pytest.mark.parametrize("messages", [0, 10, 300])
async def test_a_run_on_a_fresh_file_with_a_long_history_never_retries_a_flush(
    tmp_path: Path, messages: int
) -> None:
    async with sqlite_store(tmp_path / "fresh.db") as store:
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


class CountingSQLiteStore(SQLiteStore):
    """A real SQLite store that counts the messages its branch reads return."""

    branch_rows = 0

    async def _select_branch(
        self, chat_uuid: UUID, page: BranchPage, version: Hashable | None
    ) -> list[Message]:
        messages = await super()._select_branch(chat_uuid, page, version)
        self.branch_rows += len(messages)
        return messages


@pytest.mark.parametrize("messages", [30, 300])
async def test_a_run_reads_its_history_once_not_again_after_storing_its_input(
    tmp_path: Path, messages: int
) -> None:
    store = CountingSQLiteStore(f"sqlite:///{tmp_path / 'count.db'}")
    async with store:
        await store.connect()
        await store.setup()
        chat = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="long"))
        await append_history(store, chat.chat_uuid, messages)
        before = store.branch_rows

        agent = storage_agent(store, "count")
        await collect(agent.run(run_input("long", "count", [user("new")])))
        await agent.persisted()

        assert store.branch_rows - before == messages + 1  # the history, then the new message
        inner = agent.inner_agent
        assert isinstance(inner, ScriptedAgent)
        given = inner.inputs[0].messages
        assert given[-1].id == "new"
        assert given[0].id == "u0"


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
