"""Contract: concurrent callers and transactions (all-or-nothing, nesting, isolation)."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any

import pytest

from threadstore import Store, models
from threadstore.testing._suite import (
    AddMessage,
    MakeChat,
    Repository,
    add_reasoning,
    add_tool_call,
    stored_chat,
    stored_message,
)


class Boom(Exception):
    """Raised inside a transaction to make it roll back."""


async def snapshot(store: Store) -> dict[str, Any]:
    """Everything a user can read about every chat in ``store``."""
    chats = list(await store.get_all_chats())
    return {
        "chats": chats,
        "messages": {c.chat_uuid: list(await store.get_chat_messages(c.chat_uuid)) for c in chats},
        "runs": {c.chat_uuid: await store.get_run(c.chat_uuid, "run-1") for c in chats},
    }


# --- concurrent callers ------------------------------------------------------------------------


async def test_concurrent_creates_of_one_thread_make_one_chat(repo: Repository) -> None:
    user = uuid.uuid4()

    chats = await asyncio.gather(
        *(repo.create_chat(models.ChatCreate(user_uuid=user, thread_id="same")) for _ in range(20))
    )

    assert len({c.chat_uuid for c in chats}) == 1
    assert [c.chat_uuid for c in await repo.get_all_chats(user)] == [chats[0].chat_uuid]


async def test_concurrent_creates_of_one_thread_id_for_two_users_make_two_chats(
    repo: Repository,
) -> None:
    alice, bob = uuid.uuid4(), uuid.uuid4()

    chats = await asyncio.gather(
        *(
            repo.create_chat(models.ChatCreate(user_uuid=user, thread_id="same"))
            for _ in range(10)
            for user in (alice, bob)
        )
    )

    by_user = {(c.user_uuid, c.chat_uuid) for c in chats}
    assert len(by_user) == 2
    assert {user for user, _ in by_user} == {alice, bob}


async def test_concurrent_creates_of_different_threads_lose_nothing(repo: Repository) -> None:
    user = uuid.uuid4()

    chats = await asyncio.gather(
        *(repo.create_chat(models.ChatCreate(user_uuid=user, thread_id=f"t{i}")) for i in range(20))
    )

    assert len({c.chat_uuid for c in chats}) == 20
    assert {c.thread_id for c in await repo.get_all_chats(user)} == {f"t{i}" for i in range(20)}


async def test_concurrent_appends_form_one_unbroken_branch(
    repo: Repository, make_chat: MakeChat
) -> None:
    chat = await make_chat()

    created = await asyncio.gather(
        *(
            repo.create_message(models.MessageCreate(chat_uuid=chat.chat_uuid, content=str(i)))
            for i in range(20)
        )
    )

    history = await repo.get_chat_messages(chat.chat_uuid)
    assert {m.message_uuid for m in history} == {m.message_uuid for m in created}
    assert history[0].parent_uuid is None
    for parent, child in itertools.pairwise(history):
        assert child.parent_uuid == parent.message_uuid
        assert child.seq > parent.seq


async def test_concurrent_tool_calls_on_one_message_are_all_kept(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    message = await add_message(await make_chat(), "")

    await asyncio.gather(*(add_tool_call(repo, message, f"c{i}") for i in range(20)))

    stored = await stored_message(repo, message)
    assert {tc.tool_call_id for tc in stored.tool_calls} == {f"c{i}" for i in range(20)}


# --- transactions ------------------------------------------------------------------------------


async def test_writes_inside_a_transaction_commit_together(repo: Repository) -> None:
    user = uuid.uuid4()

    async with repo.transaction():
        chat = await repo.create_chat(models.ChatCreate(user_uuid=user, thread_id="t"))
        assert await stored_chat(repo, chat) == chat
        message = await repo.create_message(
            models.MessageCreate(chat_uuid=chat.chat_uuid, content="a")
        )
        call = await add_tool_call(repo, message)
        assert await repo.get_tool_call_by_agui_id(message.message_uuid, "c") == call

    assert (await stored_message(repo, message)).tool_calls == [call]
    assert [c.chat_uuid for c in await repo.get_all_chats(user)] == [chat.chat_uuid]


async def test_an_exception_inside_a_transaction_rolls_back_every_write(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    existing = await make_chat(name="before", state={"v": 1})
    doomed = await make_chat()
    kept = await add_message(existing, "kept", run_id="run-1")
    await store.start_run(
        models.Run(chat_uuid=existing.chat_uuid, thread_id=existing.thread_id, run_id="run-1")
    )
    before = await snapshot(store)
    raised = Boom("stop")

    with pytest.raises(Boom) as caught:
        async with store.transaction():
            new = await store.create_chat(
                models.ChatCreate(user_uuid=uuid.uuid4(), thread_id="new")
            )
            await store.create_message(models.MessageCreate(chat_uuid=new.chat_uuid, content="new"))
            added = await store.create_message(
                models.MessageCreate(chat_uuid=existing.chat_uuid, content="added")
            )
            await add_tool_call(store, kept)
            await add_reasoning(store, added, content="r")
            await store.update_message(kept.message_uuid, models.MessageUpdate(content="changed"))
            await store.update_chat_name(existing.chat_uuid, "after")
            await store.update_chat_state(existing.chat_uuid, {"v": 2})
            await store.branches.set_active_leaf(existing.chat_uuid, kept.message_uuid)
            await store.start_run(
                models.Run(chat_uuid=new.chat_uuid, thread_id="new", run_id="run-1")
            )
            await store.delete_chat(doomed.chat_uuid)
            raise raised

    assert caught.value is raised
    assert await snapshot(store) == before
    assert await store.chats.get_chat(new.chat_uuid) is None
    assert await store.get_message(added.message_uuid) is None


async def test_rolled_back_updates_of_existing_records_and_runs_leave_them_as_they_were(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    message = await add_message(chat, "draft", run_id="run-1", in_progress=True)
    call = await add_tool_call(store, message, arguments="{}")
    step = await add_reasoning(store, message, content="thinking")
    await store.start_run(
        models.Run(chat_uuid=chat.chat_uuid, thread_id=chat.thread_id, run_id="run-1", owner="me")
    )
    before = await snapshot(store)

    with pytest.raises(Boom):
        async with store.transaction():
            await store.update_message_tool_call(
                call.uuid, models.MessageToolCallUpdate(content="r")
            )
            await store.update_message_reasoning(
                step.uuid, models.MessageReasoningUpdate(content="x")
            )
            await store.heartbeat_runs("me", [(chat.chat_uuid, "run-1")])
            await store.finalize_run_records(
                chat.chat_uuid, "run-1", models.MessageStatus.INTERRUPTED
            )
            await store.finish_run(chat.chat_uuid, "run-1", models.RunStatus.INTERRUPTED, "stopped")
            raise Boom("stop")

    assert await snapshot(store) == before


async def test_a_nested_transaction_joins_the_outer_one(repo: Repository) -> None:
    user = uuid.uuid4()

    with pytest.raises(Boom):
        async with repo.transaction():
            async with repo.transaction():
                inner = await repo.create_chat(models.ChatCreate(user_uuid=user, thread_id="inner"))
            await repo.create_chat(models.ChatCreate(user_uuid=user, thread_id="outer"))
            raise Boom

    assert await stored_chat(repo, inner) is None
    assert list(await repo.get_all_chats(user)) == []

    async with repo.transaction():
        async with repo.transaction():
            committed = await repo.create_chat(models.ChatCreate(user_uuid=user, thread_id="inner"))
    assert await stored_chat(repo, committed) == committed


async def test_a_cancelled_transaction_rolls_back_and_releases_the_store(repo: Repository) -> None:
    user = uuid.uuid4()
    entered = asyncio.Event()

    async def interrupted() -> None:
        async with repo.transaction():
            await repo.create_chat(models.ChatCreate(user_uuid=user, thread_id="cancelled"))
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(interrupted())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert await repo.get_chat_by_thread_id(user, "cancelled") is None
    after = await repo.create_chat(models.ChatCreate(user_uuid=user, thread_id="after"))
    assert [c.chat_uuid for c in await repo.get_all_chats(user)] == [after.chat_uuid]


async def test_a_concurrent_write_is_not_rolled_back_with_another_tasks_transaction(
    repo: Repository,
) -> None:
    user = uuid.uuid4()
    entered, writer_started = asyncio.Event(), asyncio.Event()

    async def rolled_back() -> None:
        async with repo.transaction():
            inside = await repo.create_chat(models.ChatCreate(user_uuid=user, thread_id="inside"))
            entered.set()
            await writer_started.wait()
            # More round trips inside the transaction: a writer that did not wait for
            # the transaction would get its statements in between these.
            for _ in range(5):
                await stored_chat(repo, inside)
            raise Boom

    transaction = asyncio.create_task(rolled_back())
    await entered.wait()
    writer = asyncio.create_task(
        repo.create_chat(models.ChatCreate(user_uuid=user, thread_id="outside"))
    )
    await asyncio.sleep(0)
    writer_started.set()
    with pytest.raises(Boom):
        await transaction
    outside = await writer

    assert await stored_chat(repo, outside) == outside
    assert await repo.get_chat_by_thread_id(user, "inside") is None
    assert [c.thread_id for c in await repo.get_all_chats(user)] == ["outside"]


async def test_a_concurrent_reader_never_sees_uncommitted_writes(repo: Repository) -> None:
    user = uuid.uuid4()
    entered, release = asyncio.Event(), asyncio.Event()
    created: list[models.Chat] = []

    async def rolled_back() -> None:
        async with repo.transaction():
            created.append(await repo.create_chat(models.ChatCreate(user_uuid=user, thread_id="t")))
            entered.set()
            await release.wait()
            raise Boom

    transaction = asyncio.create_task(rolled_back())
    await entered.wait()
    by_uuid = asyncio.create_task(stored_chat(repo, created[0]))
    by_thread = asyncio.create_task(repo.get_chat_by_thread_id(user, "t"))
    listing = asyncio.create_task(repo.get_all_chats(user))
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(Boom):
        await transaction

    assert await by_uuid is None
    assert await by_thread is None
    assert list(await listing) == []
