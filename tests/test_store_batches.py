"""Store.apply_writes (a backend batch seam): a batch of writes lands in order, all or nothing."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence

import pytest

from threadstore import (
    Chat,
    InvalidInputError,
    MessageCreate,
    MessageReasoningCreate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    NotFoundError,
    Role,
    Run,
    RunStatus,
    Store,
)
from threadstore.store import Write
from threadstore.store.ops import (
    CreateMessage,
    CreateReasoning,
    CreateToolCall,
    FinalizeRunRecords,
    FinishRun,
    UpdateChatState,
    UpdateMessage,
    UpdateToolCall,
)

MakeChat = Callable[..., Awaitable[Chat]]


def turn(chat: Chat, message_uuid: uuid.UUID) -> list[Write]:
    """An assistant message with a tool call and a reasoning step, then updates of both."""
    call = MessageToolCallCreate(
        message_uuid=message_uuid, tool_call_id="call-1", name="search", arguments="{}"
    )
    return [
        CreateMessage(
            MessageCreate(
                chat_uuid=chat.chat_uuid,
                message_uuid=message_uuid,
                role=Role.ASSISTANT,
                content="",
                agui_id="a-1",
                run_id="run-1",
            )
        ),
        CreateToolCall(call),
        CreateReasoning(MessageReasoningCreate(message_uuid=message_uuid, content="thinking")),
        UpdateMessage(message_uuid, MessageUpdate(content="the answer")),
        UpdateToolCall(
            call.uuid, MessageToolCallUpdate(content="result", status=MessageStatus.COMPLETE)
        ),
    ]


async def test_a_batch_lands_in_order_as_its_calls_would(store: Store, make_chat: MakeChat) -> None:
    chat = await make_chat()
    message_uuid = uuid.uuid4()

    await store.apply_writes(
        [*turn(chat, message_uuid), UpdateChatState(chat.chat_uuid, {"step": 2})]
    )

    (message,) = await store.get_chat_messages(chat.chat_uuid)
    assert (message.message_uuid, message.content, message.agui_id) == (
        message_uuid,
        "the answer",
        "a-1",
    )
    (call,) = message.tool_calls
    assert (call.arguments, call.content, call.status) == ("{}", "result", MessageStatus.COMPLETE)
    assert [r.content for r in message.reasonings] == ["thinking"]
    reloaded = await store.chats.get_chat(chat.chat_uuid)
    assert reloaded is not None and reloaded.state == {"step": 2}


async def test_a_failing_write_undoes_the_whole_batch(store: Store, make_chat: MakeChat) -> None:
    chat = await make_chat()
    kept = await store.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role=Role.USER, content="kept")
    )
    orphan = MessageToolCallCreate(message_uuid=uuid.uuid4(), tool_call_id="c", name="n")

    with pytest.raises(NotFoundError):
        await store.apply_writes(
            [
                *turn(chat, uuid.uuid4()),
                UpdateMessage(kept.message_uuid, MessageUpdate(content="changed")),
                CreateToolCall(orphan),
            ]
        )

    assert [(m.message_uuid, m.content) for m in await store.get_chat_messages(chat.chat_uuid)] == [
        (kept.message_uuid, "kept")
    ]


async def test_runs_are_finalized_and_finished_in_a_batch(
    store: Store, make_chat: MakeChat
) -> None:
    chat = await make_chat()
    await store.start_run(Run(chat_uuid=chat.chat_uuid, thread_id=chat.thread_id, run_id="run-1"))
    message_uuid = uuid.uuid4()
    creates = turn(chat, message_uuid)[:3]

    await store.apply_writes(
        [
            *creates,
            FinalizeRunRecords(chat.chat_uuid, "run-1", MessageStatus.INTERRUPTED),
            FinishRun(chat.chat_uuid, "run-1", RunStatus.INTERRUPTED, "cancelled"),
        ]
    )

    (message,) = await store.get_chat_messages(chat.chat_uuid)
    assert message.status is MessageStatus.INTERRUPTED and not message.in_progress
    assert [c.status for c in message.tool_calls] == [MessageStatus.INTERRUPTED]
    assert [r.status for r in message.reasonings] == [MessageStatus.INTERRUPTED]
    run = await store.get_run(chat.chat_uuid, "run-1")
    assert run is not None and (run.status, run.error) == (RunStatus.INTERRUPTED, "cancelled")


async def test_a_batch_inside_a_transaction_joins_it(store: Store, make_chat: MakeChat) -> None:
    chat = await make_chat()

    with pytest.raises(RuntimeError):
        async with store.transaction():
            await store.apply_writes(turn(chat, uuid.uuid4())[:1])
            raise RuntimeError("roll back")

    assert await store.get_chat_messages(chat.chat_uuid) == []


async def test_an_unknown_write_is_refused_before_anything_is_written(
    store: Store, make_chat: MakeChat
) -> None:
    chat = await make_chat()

    with pytest.raises(InvalidInputError, match="delete_chat"):
        await store.apply_writes(
            [*turn(chat, uuid.uuid4()), ("delete_chat", (chat.chat_uuid,))]  # type: ignore[list-item]
        )

    assert await store.get_chat_messages(chat.chat_uuid) == []
    assert await store.chats.get_chat(chat.chat_uuid) is not None


async def test_an_empty_batch_writes_nothing(store: Store) -> None:
    await store.apply_writes([])


async def test_a_subclass_sees_every_write_of_a_batch_by_its_type(
    store: Store, make_chat: MakeChat
) -> None:
    chat = await make_chat()
    seen: list[str] = []
    base = type(store)

    class Audited(base):  # type: ignore[valid-type, misc]
        async def apply_writes(self, writes: Sequence[Write]) -> None:
            seen.extend(type(write).__name__ for write in writes)
            await super().apply_writes(writes)

    store.__class__ = Audited
    try:
        await store.apply_writes(turn(chat, uuid.uuid4()))
    finally:
        store.__class__ = base

    assert seen == [
        "CreateMessage",
        "CreateToolCall",
        "CreateReasoning",
        "UpdateMessage",
        "UpdateToolCall",
    ]
    (message,) = await store.get_chat_messages(chat.chat_uuid)
    assert message.content == "the answer" and len(message.tool_calls) == 1


async def test_a_batch_does_not_read_back_what_it_does_not_return(
    store: Store, make_chat: MakeChat, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not hasattr(store, "_messages_with_children"):
        pytest.skip("the read-back this checks is PostgreSQL's")
    chat = await make_chat()
    message_uuid = uuid.uuid4()
    await store.apply_writes(turn(chat, message_uuid)[:2])  # a message with a tool call

    def no_read_back(*args: object) -> None:
        raise AssertionError("the batch read the message's children back")

    monkeypatch.setattr(store, "_messages_with_children", no_read_back)
    await store.apply_writes([UpdateMessage(message_uuid, MessageUpdate(content="x"))])
    monkeypatch.undo()

    (message,) = await store.get_chat_messages(chat.chat_uuid)
    assert message.content == "x" and len(message.tool_calls) == 1
