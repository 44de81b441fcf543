"""Contract: the tool calls and reasoning steps nested in a message, and model subclasses."""

from __future__ import annotations

import uuid

import pytest

from threadstore import models
from threadstore.models import FORMAT_VERSION
from threadstore.testing._suite import (
    NOT_UTF8,
    AddMessage,
    MakeChat,
    OpenStore,
    Repository,
    add_reasoning,
    add_tool_call,
    assert_given_fields,
    stored_message,
)

# --- tool calls ------------------------------------------------------------------------------


async def test_create_tool_call_returns_every_given_field(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    message = await add_message(await make_chat(), "")

    data = models.MessageToolCallCreate(
        uuid=uuid.uuid4(),
        message_uuid=message.message_uuid,
        tool_call_id="call-1",
        name="get_weather",
        arguments='{"city": "Oslo"}',
        content="sunny",
        result_message_id="tool-msg-1",
        error=None,
        status=models.MessageStatus.COMPLETE,
        in_progress=False,
        step_name="tools",
        metadata={"latency_ms": 12},
    )

    tool_call = await repo.create_message_tool_call(data)

    assert_given_fields(tool_call, data)
    assert tool_call.format_version == FORMAT_VERSION
    assert await repo.get_tool_call_by_agui_id(message.message_uuid, "call-1") == tool_call


async def test_create_tool_call_for_an_unknown_message_raises_value_error(repo: Repository) -> None:
    with pytest.raises(ValueError):
        await repo.create_message_tool_call(
            models.MessageToolCallCreate(message_uuid=uuid.uuid4(), tool_call_id="t", name="f")
        )


async def test_tool_calls_are_nested_in_their_message_in_creation_order(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    message = await add_message(chat, "")
    other = await add_message(chat, "")
    created = [await add_tool_call(repo, message, f"c{i}") for i in range(3)]
    await add_tool_call(repo, other, "c0", "g")

    assert (await stored_message(repo, message)).tool_calls == created
    branch = await repo.get_chat_messages(chat.chat_uuid)
    assert branch[0].tool_calls == created
    assert [tc.name for tc in branch[1].tool_calls] == ["g"]


async def test_get_tool_call_by_agui_id_is_scoped_to_its_message(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    first, second = await add_message(chat, ""), await add_message(chat, "")
    a = await add_tool_call(repo, first, "same", "a")
    b = await add_tool_call(repo, second, "same", "b")

    assert await repo.get_tool_call_by_agui_id(first.message_uuid, "same") == a
    assert await repo.get_tool_call_by_agui_id(second.message_uuid, "same") == b
    assert await repo.get_tool_call_by_agui_id(first.message_uuid, "other") is None
    assert await repo.get_tool_call_by_agui_id(uuid.uuid4(), "same") is None


async def test_update_tool_call_applies_only_explicitly_set_non_none_fields(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    message = await add_message(await make_chat(), "")
    tool_call = await add_tool_call(
        repo, message, "call", "search", arguments='{"q":', step_name="s", metadata={"k": 1}
    )

    updated = await repo.update_message_tool_call(
        tool_call.uuid,
        models.MessageToolCallUpdate(
            arguments='{"q": "x"}',
            content="result",
            name=None,
            status=models.MessageStatus.COMPLETE,
        ),
    )

    assert updated is not None
    assert updated.arguments == '{"q": "x"}'
    assert updated.content == "result"
    assert updated.status == models.MessageStatus.COMPLETE
    assert updated.name == "search"
    assert updated.step_name == "s"
    assert updated.metadata == {"k": 1}
    assert updated.in_progress is True
    assert await repo.get_tool_call_by_agui_id(message.message_uuid, "call") == updated
    assert (await stored_message(repo, message)).tool_calls == [updated]


async def test_update_tool_call_can_set_every_patchable_field(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    message = await add_message(await make_chat(), "")
    tool_call = await add_tool_call(repo, message)

    patch = models.MessageToolCallUpdate(
        name="g",
        arguments="{}",
        content="out",
        result_message_id="r1",
        error="boom",
        status=models.MessageStatus.ERRORED,
        in_progress=False,
        step_name="st",
        metadata={"x": [1]},
    )

    await repo.update_message_tool_call(tool_call.uuid, patch)

    stored = await repo.get_tool_call_by_agui_id(message.message_uuid, "c")
    assert stored is not None
    assert_given_fields(stored, patch)


async def test_update_tool_call_of_unknown_uuid_returns_none(repo: Repository) -> None:
    assert (
        await repo.update_message_tool_call(uuid.uuid4(), models.MessageToolCallUpdate(name="x"))
        is None
    )


# --- reasoning -------------------------------------------------------------------------------


async def test_create_reasoning_returns_every_given_field(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    message = await add_message(await make_chat(), "")
    data = models.MessageReasoningCreate(
        uuid=uuid.uuid4(),
        message_uuid=message.message_uuid,
        agui_id="r-1",
        name="think",
        content="Let me see",
        encrypted_value="opaque",
        status=models.MessageStatus.COMPLETE,
        in_progress=False,
        step_name="plan",
        metadata={"tokens": 5},
    )

    reasoning = await repo.create_message_reasoning(data)

    assert_given_fields(reasoning, data)
    assert reasoning.format_version == FORMAT_VERSION
    assert (await stored_message(repo, message)).reasonings == [reasoning]


async def test_create_reasoning_for_an_unknown_message_raises_value_error(repo: Repository) -> None:
    with pytest.raises(ValueError):
        await repo.create_message_reasoning(
            models.MessageReasoningCreate(message_uuid=uuid.uuid4())
        )


async def test_update_reasoning_applies_only_explicitly_set_non_none_fields(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    message = await add_message(await make_chat(), "")
    reasoning = await add_reasoning(repo, message, content="Let", name="r", metadata={"a": 1})

    updated = await repo.update_message_reasoning(
        reasoning.uuid,
        models.MessageReasoningUpdate(content="Let me think", name=None, in_progress=False),
    )

    assert updated is not None
    assert updated.content == "Let me think"
    assert updated.in_progress is False
    assert updated.name == "r"
    assert updated.metadata == {"a": 1}
    assert updated.status == models.MessageStatus.ACTIVE
    assert (await stored_message(repo, message)).reasonings == [updated]


async def test_update_reasoning_can_set_every_patchable_field(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    message = await add_message(await make_chat(), "")
    reasoning = await add_reasoning(repo, message)

    patch = models.MessageReasoningUpdate(
        name="n",
        content="c",
        encrypted_value="e",
        status=models.MessageStatus.INTERRUPTED,
        in_progress=False,
        step_name="s",
        metadata={"m": None},
    )

    await repo.update_message_reasoning(reasoning.uuid, patch)

    stored = await stored_message(repo, message)
    (only,) = stored.reasonings
    assert_given_fields(only, patch)


async def test_update_reasoning_of_unknown_uuid_returns_none(repo: Repository) -> None:
    assert (
        await repo.update_message_reasoning(
            uuid.uuid4(), models.MessageReasoningUpdate(content="x")
        )
        is None
    )


async def test_reasoning_and_tool_calls_keep_their_production_order(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    message = await add_message(await make_chat(), "")
    first = await add_reasoning(repo, message, content="think 1")
    call = await add_tool_call(repo, message)
    second = await add_reasoning(repo, message, content="think 2")

    stored = await stored_message(repo, message)
    assert [r.content for r in stored.reasonings] == ["think 1", "think 2"]
    positions = {r.uuid: r.seq for r in stored.reasonings} | {
        tc.uuid: tc.seq for tc in stored.tool_calls
    }
    assert positions[first.uuid] < positions[call.uuid] < positions[second.uuid]


# --- subclassed models -----------------------------------------------------------------------


class TeamMessage(models.Message):
    """A message with app-specific fields the base schema has no column for."""

    team: str = ""
    blob: bytes | None = None


class TeamMessageCreate(models.MessageCreate):
    team: str = ""
    blob: bytes | None = None


class TeamMessageUpdate(models.MessageUpdate):
    team: str | None = None
    blob: bytes | None = None


class TracedToolCall(models.ToolCall):
    """A tool call carrying a trace id and a raw payload."""

    trace_id: str = ""
    payload: bytes | None = None


class TracedToolCallCreate(models.MessageToolCallCreate):
    trace_id: str = ""
    payload: bytes | None = None


class TracedToolCallUpdate(models.MessageToolCallUpdate):
    trace_id: str | None = None


class ScoredReasoning(models.Reasoning):
    """A reasoning step with a score."""

    score: float = 0.0


class ScoredReasoningCreate(models.MessageReasoningCreate):
    score: float = 0.0


async def test_a_message_subclass_keeps_its_own_fields_through_create_update_and_read(
    open_test_store: OpenStore,
) -> None:
    store = await open_test_store(message_model=TeamMessage)
    chat = await store.create_chat(models.ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))

    created = await store.create_message(
        TeamMessageCreate(
            chat_uuid=chat.chat_uuid, agui_id="m1", content="hi", team="core", blob=NOT_UTF8
        )
    )
    assert isinstance(created, TeamMessage)
    assert (created.team, created.blob) == ("core", NOT_UTF8)

    updated = await store.update_message(
        created.message_uuid, TeamMessageUpdate(team="platform", content="hi!")
    )
    assert isinstance(updated, TeamMessage)
    assert (updated.team, updated.blob, updated.content) == ("platform", NOT_UTF8, "hi!")

    reads = [
        await store.get_message(created.message_uuid),
        await store.get_message_by_agui_id(chat.chat_uuid, "m1"),
        (await store.get_chat_messages(chat.chat_uuid))[0],
        (await store.get_last_messages([chat.chat_uuid]))[chat.chat_uuid],
    ]
    for read in reads:
        assert isinstance(read, TeamMessage)
        assert (read.team, read.blob, read.content) == ("platform", NOT_UTF8, "hi!")

    # A base update leaves the subclass fields alone.
    await store.update_message(
        created.message_uuid, models.MessageUpdate(status=models.MessageStatus.COMPLETE)
    )
    stored = await store.get_message(created.message_uuid)
    assert isinstance(stored, TeamMessage)
    assert (stored.team, stored.blob) == ("platform", NOT_UTF8)

    replaced = await store.update_message(
        created.message_uuid, TeamMessageUpdate(blob=NOT_UTF8[::-1])
    )
    assert isinstance(replaced, TeamMessage)
    assert (replaced.team, replaced.blob) == ("platform", NOT_UTF8[::-1])
    assert await store.get_message(created.message_uuid) == replaced


async def test_a_plain_create_in_a_subclassed_store_gets_the_subclass_defaults(
    open_test_store: OpenStore,
) -> None:
    store = await open_test_store(message_model=TeamMessage)
    chat = await store.create_chat(models.ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))

    message = await store.create_message(
        models.MessageCreate(chat_uuid=chat.chat_uuid, content="x")
    )

    stored = await store.get_message(message.message_uuid)
    assert isinstance(stored, TeamMessage)
    assert (stored.team, stored.blob) == ("", None)


async def test_tool_call_and_reasoning_subclasses_keep_their_own_fields(
    open_test_store: OpenStore,
) -> None:
    store = await open_test_store(tool_call_model=TracedToolCall, reasoning_model=ScoredReasoning)
    chat = await store.create_chat(models.ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))
    message = await store.create_message(models.MessageCreate(chat_uuid=chat.chat_uuid))

    call = await store.create_message_tool_call(
        TracedToolCallCreate(
            message_uuid=message.message_uuid,
            tool_call_id="c",
            name="f",
            trace_id="trace-1",
            payload=NOT_UTF8,
        )
    )
    reasoning = await store.create_message_reasoning(
        ScoredReasoningCreate(message_uuid=message.message_uuid, score=0.75)
    )
    assert isinstance(call, TracedToolCall)
    assert (call.trace_id, call.payload) == ("trace-1", NOT_UTF8)
    assert isinstance(reasoning, ScoredReasoning) and reasoning.score == 0.75

    updated = await store.update_message_tool_call(
        call.uuid, TracedToolCallUpdate(trace_id="trace-2", arguments="{}")
    )
    assert isinstance(updated, TracedToolCall)
    assert (updated.trace_id, updated.payload, updated.arguments) == ("trace-2", NOT_UTF8, "{}")

    by_id = await store.get_tool_call_by_agui_id(message.message_uuid, "c")
    stored = await stored_message(store, message)
    for read in (by_id, stored.tool_calls[0]):
        assert isinstance(read, TracedToolCall)
        assert (read.trace_id, read.payload) == ("trace-2", NOT_UTF8)
    assert isinstance(stored.reasonings[0], ScoredReasoning)
    assert stored.reasonings[0].score == 0.75
