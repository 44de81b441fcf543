"""Deletion that stays deleted: no late write brings a deleted chat or its messages back.

A run that is still streaming when its chat is deleted keeps writing for a while.
Every one of those writes must find nothing to write to: creates raise
``NotFoundError`` (a ``ValueError``), updates return ``None``, and nothing reappears
in any listing. Runs on every backend through the ``store`` fixture.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

import pytest
from ag_ui.core import EventType

from agui_scripts import ScriptedAgent, StoreSpy, collect, full_turn, run_input, user
from threadstore import (
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageReasoningUpdate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    NotFoundError,
    Run,
    RunStatus,
    Store,
)
from threadstore.agui import StorageAgent
from threadstore.agui._agent import CHAT_DELETED_ERROR_CODE

MakeChat = Callable[..., Awaitable[Chat]]
AddMessage = Callable[..., Awaitable[Message]]


async def assert_gone(store: Store, chat: Chat, messages: list[UUID]) -> None:
    """Nothing of ``chat`` is readable any more, by any read."""
    assert await store.chats.get_chat(chat.chat_uuid) is None
    assert await store.get_chat_by_thread_id(chat.user_uuid, chat.thread_id) is None
    assert chat.chat_uuid not in {c.chat_uuid for c in await store.get_all_chats()}
    assert list(await store.get_all_chats(chat.user_uuid)) == []
    assert (await store.chats.list_chats(chat.user_uuid)).items == []
    assert list(await store.get_chat_messages(chat.chat_uuid)) == []
    assert await store.get_last_messages([chat.chat_uuid]) == {}
    for message_uuid in messages:
        assert await store.get_message(message_uuid) is None


async def a_chat_mid_run(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> tuple[Chat, Message, Message, UUID, UUID]:
    """A chat whose run has written a user message and a streaming answer with children."""
    chat = await make_chat()
    await store.start_run(Run(chat_uuid=chat.chat_uuid, thread_id=chat.thread_id, run_id="r1"))
    question = await add_message(chat, "question", run_id="r1", agui_id="u1")
    answer = await add_message(chat, "stream", run_id="r1", agui_id="a1")
    call = await store.create_message_tool_call(
        MessageToolCallCreate(message_uuid=answer.message_uuid, tool_call_id="c1", name="f")
    )
    step = await store.create_message_reasoning(
        MessageReasoningCreate(message_uuid=answer.message_uuid, content="hmm")
    )
    return chat, question, answer, call.uuid, step.uuid


async def test_late_creates_after_delete_raise_not_found(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat, question, answer, _, _ = await a_chat_mid_run(store, make_chat, add_message)

    await store.delete_chat(chat.chat_uuid)

    late_creates: list[Awaitable[Any]] = [
        store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="late")),
        store.create_message(
            MessageCreate(chat_uuid=chat.chat_uuid, content="late", parent_uuid=answer.message_uuid)
        ),
        store.create_message_tool_call(
            MessageToolCallCreate(message_uuid=answer.message_uuid, tool_call_id="c2", name="g")
        ),
        store.create_message_reasoning(
            MessageReasoningCreate(message_uuid=answer.message_uuid, content="late")
        ),
        store.start_run(Run(chat_uuid=chat.chat_uuid, thread_id=chat.thread_id, run_id="r2")),
    ]
    for create in late_creates:
        with pytest.raises(NotFoundError):
            await create
    with pytest.raises(ValueError):
        await store.branches.set_active_leaf(chat.chat_uuid, question.message_uuid)
    await assert_gone(store, chat, [question.message_uuid, answer.message_uuid])


async def test_late_updates_after_delete_return_none_and_change_nothing(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat, question, answer, call, step = await a_chat_mid_run(store, make_chat, add_message)

    await store.delete_chat(chat.chat_uuid)

    assert await store.update_message(answer.message_uuid, MessageUpdate(content="more")) is None
    assert (
        await store.update_message_tool_call(call, MessageToolCallUpdate(content="result")) is None
    )
    assert (
        await store.update_message_reasoning(step, MessageReasoningUpdate(content="more")) is None
    )
    assert await store.update_chat_state(chat.chat_uuid, {"late": True}) is None
    assert await store.update_chat_name(chat.chat_uuid, "late") is None
    await store.heartbeat_runs("owner", [(chat.chat_uuid, "r1")])
    assert await store.finish_run(chat.chat_uuid, "r1", RunStatus.COMPLETE) is None
    assert await store.get_run(chat.chat_uuid, "r1") is None
    changed = await store.finalize_run_records(chat.chat_uuid, "r1", MessageStatus.INTERRUPTED)
    assert changed == 0
    await assert_gone(store, chat, [question.message_uuid, answer.message_uuid])


async def test_a_late_flush_transaction_writes_nothing(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat, question, answer, call, _ = await a_chat_mid_run(store, make_chat, add_message)
    await store.delete_chat(chat.chat_uuid)

    with pytest.raises(NotFoundError):
        async with store.transaction():
            await store.update_message(answer.message_uuid, MessageUpdate(content="final"))
            await store.update_message_tool_call(call, MessageToolCallUpdate(content="done"))
            await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="next"))

    await assert_gone(store, chat, [question.message_uuid, answer.message_uuid])


async def test_starting_the_thread_again_makes_a_new_chat_late_writes_never_reach(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat, _, answer, _, _ = await a_chat_mid_run(store, make_chat, add_message)
    await store.delete_chat(chat.chat_uuid)

    fresh = await store.create_chat(ChatCreate(user_uuid=chat.user_uuid, thread_id=chat.thread_id))
    with pytest.raises(NotFoundError):
        await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="late"))
    assert await store.update_message(answer.message_uuid, MessageUpdate(content="x")) is None

    assert fresh.chat_uuid != chat.chat_uuid
    assert list(await store.get_chat_messages(fresh.chat_uuid)) == []
    assert [c.chat_uuid for c in await store.get_all_chats(chat.user_uuid)] == [fresh.chat_uuid]


async def test_a_delete_racing_a_busy_writer_stays_deleted(
    store: Store, make_chat: MakeChat
) -> None:
    chat = await make_chat()
    other = await make_chat()
    created: list[UUID] = []
    outcomes: list[str] = []
    deleted = asyncio.Event()

    async def writer() -> None:
        # Appends and patches until well after the delete; each write either lands
        # before the delete (and is then deleted with the chat) or finds no chat.
        writes_after_delete = 0
        while writes_after_delete < 10:
            if deleted.is_set():
                writes_after_delete += 1
            try:
                message = await store.create_message(
                    MessageCreate(chat_uuid=chat.chat_uuid, content="chunk", run_id="r1")
                )
            except NotFoundError:
                outcomes.append("create refused")
                await asyncio.sleep(0)
                continue
            created.append(message.message_uuid)
            updated = await store.update_message(
                message.message_uuid, MessageUpdate(content="chunk!")
            )
            outcomes.append("updated" if updated else "update found nothing")
            await asyncio.sleep(0)

    async def deleter() -> None:
        while len(created) < 5:
            await asyncio.sleep(0.001)
        assert await store.delete_chat(chat.chat_uuid) is not None
        deleted.set()

    await asyncio.gather(writer(), deleter())

    assert "create refused" in outcomes
    await assert_gone(store, chat, created)
    assert await store.chats.get_chat(other.chat_uuid) == other


async def test_a_run_still_streaming_when_its_chat_is_deleted_never_brings_it_back(
    store: Store,
) -> None:
    owner = uuid.uuid4()
    script = full_turn()
    inner = ScriptedAgent(script, pause_after=len(script) // 2)
    agent = StorageAgent("assistant", owner, store, store, inner, run_repo=store, owner="p1")
    agent.checkpoint_interval = 0.01
    agent.retry_base_delay = agent.retry_max_delay = 0.001
    agent.final_flush_deadline = 0.0
    run = asyncio.create_task(collect(agent.run(run_input(messages=[user("u1")]))))
    await inner.paused.wait()
    await agent.persisted()
    chat = await store.get_chat_by_thread_id(owner, "thread-1")
    assert chat is not None
    written = [m.message_uuid for m in await store.get_chat_messages(chat.chat_uuid)]
    assert written

    await store.delete_chat(chat.chat_uuid)
    agent.message_repo = spy = StoreSpy(store)
    inner.gate.set()
    events = await run
    await agent.persisted()  # nothing is left to write: the chat is gone

    await assert_gone(store, chat, written)
    # The client is told its answer is not stored, instead of RUN_FINISHED.
    assert (events[-1].type, getattr(events[-1], "code", None)) == (
        EventType.RUN_ERROR,
        CHAT_DELETED_ERROR_CODE,
    )
    # A flush or the look at the chat before RUN_FINISHED, whichever came first, found
    # the chat gone; nothing was retried after that.
    assert agent.chat_deleted
    assert spy.calls["apply_writes"] + spy.calls["transaction"] <= 1
