"""Contract: messages, their history and pages, and the message tree."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from threadstore import (
    Chat,
    ConflictError,
    InvalidInputError,
    Message,
    MessageCreate,
    MessageStatus,
    MessageUpdate,
    Role,
    Store,
)
from threadstore.models import FORMAT_VERSION, MediaPart, TextPart
from threadstore.store import MAX_PAGE_SIZE
from threadstore.testing._suite import (
    NOT_UTF8,
    AddMessage,
    MakeChat,
    Repository,
    add_reasoning,
    add_tool_call,
    assert_given_fields,
    check_rejects_foreign_and_unknown,
    stored_chat,
    stored_message,
)


async def two_branches(chat: Chat, add_message: AddMessage) -> tuple[Message, Message, Message]:
    """root → a1 → a2, then b1 on root (the active branch): root, a2 and b1."""
    root = await add_message(chat, "root")
    await add_message(chat, "a1")
    a2 = await add_message(chat, "a2")
    return root, a2, await add_message(chat, "b1", parent_uuid=root.message_uuid)


def contents(messages: object) -> list[str]:
    """The contents of a sequence of messages, in order."""
    return [m.content for m in messages]  # type: ignore[attr-defined]


# --- create and read -------------------------------------------------------------------------


async def test_create_message_returns_every_given_field(
    repo: Repository, make_chat: MakeChat
) -> None:
    chat = await make_chat()
    data = MessageCreate(
        chat_uuid=chat.chat_uuid,
        message_uuid=uuid.uuid4(),
        role=Role.USER,
        content="Hello, wörld ✓",
        agui_id="msg-1",
        name="alice",
        encrypted_value="enc",
        status=MessageStatus.COMPLETE,
        in_progress=False,
        step_name="planner",
        run_id="run-1",
        metadata={"client": {"ip": "127.0.0.1"}, "n": [1, 2]},
        created_at=datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC),
    )

    message = await repo.create_message(data)

    assert_given_fields(message, data)
    assert message.parent_uuid is None
    assert message.format_version == FORMAT_VERSION
    assert message.tool_calls == [] and message.reasonings == []
    assert await repo.get_message(data.message_uuid) == message


async def test_create_message_defaults(repo: Repository, make_chat: MakeChat) -> None:
    chat = await make_chat()

    message = await repo.create_message(MessageCreate(chat_uuid=chat.chat_uuid))

    assert message.role == Role.USER  # as in the seed layer
    assert message.content == ""
    assert message.status == MessageStatus.ACTIVE
    assert message.in_progress is True
    assert message.agui_id is None and message.run_id is None
    assert message.content_parts is None
    assert message.metadata == {}
    assert message.created_at.tzinfo is not None


async def test_create_message_without_chat_uuid_raises_value_error(repo: Repository) -> None:
    with pytest.raises(ValueError, match="chat_uuid"):
        await repo.create_message(MessageCreate(content="orphan"))


async def test_create_message_for_an_unknown_chat_raises_value_error(repo: Repository) -> None:
    unknown = uuid.uuid4()
    with pytest.raises(ValueError):
        await repo.create_message(MessageCreate(chat_uuid=unknown, content="orphan"))
    assert list(await repo.get_chat_messages(unknown)) == []


async def test_a_tool_call_or_reasoning_step_with_an_existing_uuid_is_rejected(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    message = await add_message(chat, "answer")
    call = await add_tool_call(repo, message, "c1")
    step = await add_reasoning(repo, message, content="thinking")

    with pytest.raises(ConflictError):
        await add_tool_call(repo, message, "c2", "g", uuid=call.uuid)
    with pytest.raises(ConflictError):
        await add_reasoning(repo, message, uuid=step.uuid)

    stored = await stored_message(repo, message)
    assert [(c.tool_call_id, c.seq) for c in stored.tool_calls] == [("c1", 1)]
    assert [(r.content, r.seq) for r in stored.reasonings] == [("thinking", 2)]


async def test_create_message_with_an_existing_uuid_is_rejected(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    original = await add_message(chat, "original")

    with pytest.raises(ConflictError):
        await add_message(chat, "impostor", message_uuid=original.message_uuid)

    assert await repo.get_message(original.message_uuid) == original
    assert contents(await repo.get_chat_messages(chat.chat_uuid)) == ["original"]


async def test_message_seq_grows_in_creation_order(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    seqs = [(await add_message(chat, str(i))).seq for i in range(5)]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == 5


@pytest.mark.parametrize("role", list(Role))
async def test_every_role_round_trips(repo: Repository, make_chat: MakeChat, role: Role) -> None:
    chat = await make_chat()
    message = await repo.create_message(MessageCreate(chat_uuid=chat.chat_uuid, role=role))
    assert (await stored_message(repo, message)).role == role


async def test_activity_message_round_trips(repo: Repository, make_chat: MakeChat) -> None:
    chat = await make_chat()
    activity = {"steps": [{"title": "search", "done": True}], "progress": 0.5}

    message = await repo.create_message(
        MessageCreate(
            chat_uuid=chat.chat_uuid,
            role=Role.ACTIVITY,
            activity_type="PLAN",
            activity_content=activity,
        )
    )

    stored = await stored_message(repo, message)
    assert (stored.activity_type, stored.activity_content) == ("PLAN", activity)


async def test_content_parts_round_trip_with_binary_data(
    repo: Repository, make_chat: MakeChat
) -> None:
    chat = await make_chat()
    parts: list[TextPart | MediaPart] = [
        TextPart(text="What is in this picture?"),
        MediaPart(type="image", data=NOT_UTF8, mime_type="image/png"),
        MediaPart(type="document", source="url", value="https://example.com/a.pdf"),
    ]

    message = await repo.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role=Role.USER, content_parts=parts)
    )

    stored = await stored_message(repo, message)
    assert stored.content_parts == parts
    image = stored.content_parts[1]
    assert isinstance(image, MediaPart) and image.data == NOT_UTF8


async def test_empty_strings_round_trip_as_empty_strings(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    message = await add_message(chat, "", name="", step_name="")
    tool_call = await add_tool_call(repo, message, "tc", arguments="", content="")
    reasoning = await add_reasoning(repo, message, content="", encrypted_value="")

    stored = await stored_message(repo, message)
    assert (stored.content, stored.name, stored.step_name) == ("", "", "")
    assert stored.tool_calls == [tool_call]
    assert (stored.tool_calls[0].arguments, stored.tool_calls[0].content) == ("", "")
    assert stored.reasonings == [reasoning]
    assert (stored.reasonings[0].content, stored.reasonings[0].encrypted_value) == ("", "")


async def test_get_message_of_unknown_uuid_returns_none(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    await add_message(await make_chat(), "x")
    assert await repo.get_message(uuid.uuid4()) is None


async def test_get_message_by_agui_id_is_scoped_to_its_chat(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat, other = await make_chat(), await make_chat()
    mine = await add_message(chat, "mine", agui_id="same-id")
    theirs = await add_message(other, "theirs", agui_id="same-id")

    assert await repo.get_message_by_agui_id(chat.chat_uuid, "same-id") == mine
    assert await repo.get_message_by_agui_id(other.chat_uuid, "same-id") == theirs
    assert await repo.get_message_by_agui_id(chat.chat_uuid, "unknown") is None
    assert await repo.get_message_by_agui_id(uuid.uuid4(), "same-id") is None


async def test_every_record_is_readable_right_after_its_create(
    repo: Repository, make_chat: MakeChat
) -> None:
    for i in range(5):
        chat = await make_chat()
        assert await stored_chat(repo, chat) == chat
        message = await repo.create_message(
            MessageCreate(chat_uuid=chat.chat_uuid, agui_id=f"m{i}")
        )
        assert await repo.get_message(message.message_uuid) == message
        assert await repo.get_message_by_agui_id(chat.chat_uuid, f"m{i}") == message
        tool_call = await add_tool_call(repo, message, f"t{i}")
        assert await repo.get_tool_call_by_agui_id(message.message_uuid, f"t{i}") == tool_call
        reasoning = await add_reasoning(repo, message)
        assert (await stored_message(repo, message)).reasonings == [reasoning]


# --- update ----------------------------------------------------------------------------------


async def test_update_message_applies_only_explicitly_set_non_none_fields(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    message = await add_message(
        chat, "draft", name="bot", step_name="s1", metadata={"a": 1}, encrypted_value="e"
    )

    updated = await repo.update_message(
        message.message_uuid,
        MessageUpdate(content="final", name=None, status=MessageStatus.COMPLETE, in_progress=False),
    )

    assert updated is not None
    assert updated.content == "final"
    assert updated.status == MessageStatus.COMPLETE
    assert updated.in_progress is False
    assert updated.name == "bot"
    assert updated.step_name == "s1"
    assert updated.metadata == {"a": 1}
    assert updated.encrypted_value == "e"
    assert updated.message_uuid == message.message_uuid
    assert updated.seq == message.seq
    assert await repo.get_message(message.message_uuid) == updated


async def test_update_message_can_set_every_patchable_field(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    message = await add_message(await make_chat(), "x")

    patch = MessageUpdate(
        content="y",
        content_parts=[TextPart(text="t"), MediaPart(type="audio", data=NOT_UTF8)],
        name="n",
        encrypted_value="enc",
        activity_content={"k": [1]},
        status=MessageStatus.ERRORED,
        in_progress=False,
        step_name="step",
        metadata={"m": True},
    )

    updated = await repo.update_message(message.message_uuid, patch)

    stored = await stored_message(repo, message)
    assert stored == updated
    assert_given_fields(stored, patch)


async def test_update_message_to_an_empty_string_clears_the_content(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    message = await add_message(await make_chat(), "something")

    await repo.update_message(message.message_uuid, MessageUpdate(content=""))

    assert (await stored_message(repo, message)).content == ""


async def test_update_message_with_an_empty_patch_changes_nothing(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    message = await add_message(await make_chat(), "kept", metadata={"a": 1})

    updated = await repo.update_message(message.message_uuid, MessageUpdate())

    assert updated is not None
    assert (updated.content, updated.metadata) == ("kept", {"a": 1})


async def test_update_message_of_unknown_uuid_returns_none(repo: Repository) -> None:
    assert await repo.update_message(uuid.uuid4(), MessageUpdate(content="x")) is None


async def test_mutating_a_returned_message_does_not_change_the_stored_message(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    message = await add_message(chat, "hi", metadata={"list": [1]})
    await add_tool_call(repo, message, "t")

    fetched = await stored_message(repo, message)
    fetched.metadata["list"].append(2)
    fetched.tool_calls[0].name = "changed"
    fetched.tool_calls.clear()
    fetched.content = "changed"
    listed = (await repo.get_chat_messages(chat.chat_uuid))[0]
    listed.metadata.clear()

    stored = await stored_message(repo, message)
    assert stored.content == "hi"
    assert stored.metadata == {"list": [1]}
    assert [tc.name for tc in stored.tool_calls] == ["f"]


# --- history, pagination, last messages ------------------------------------------------------


async def test_get_chat_messages_returns_the_history_oldest_first(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    other = await make_chat()
    for text in ("one", "two", "three"):
        await add_message(chat, text)
    await add_message(other, "elsewhere")

    history = await repo.get_chat_messages(chat.chat_uuid)

    assert contents(history) == ["one", "two", "three"]
    assert [m.seq for m in history] == sorted(m.seq for m in history)


async def test_get_chat_messages_of_an_empty_or_unknown_chat_is_empty(
    repo: Repository, make_chat: MakeChat
) -> None:
    chat = await make_chat()
    assert list(await repo.get_chat_messages(chat.chat_uuid)) == []
    assert list(await repo.get_chat_messages(uuid.uuid4())) == []


async def test_get_chat_messages_pages_by_seq(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    messages = [await add_message(chat, str(i)) for i in range(6)]
    seq = [m.seq for m in messages]

    async def page(**kwargs: int) -> list[str]:
        return contents(await store.get_chat_messages(chat.chat_uuid, **kwargs))

    assert await page(limit=2) == ["0", "1"]
    assert await page(after=seq[1]) == ["2", "3", "4", "5"]
    assert await page(after=seq[1], limit=2) == ["2", "3"]
    assert await page(before=seq[3]) == ["0", "1", "2"]
    assert await page(before=seq[4], limit=2) == ["2", "3"]
    assert await page(after=seq[0], before=seq[4]) == ["1", "2", "3"]
    assert await page(after=seq[5]) == []
    assert await page(before=seq[0]) == []
    assert await page(limit=MAX_PAGE_SIZE) == [str(i) for i in range(6)]


async def test_walking_pages_with_after_returns_every_message_once(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    for i in range(7):
        await add_message(chat, str(i))

    seen: list[str] = []
    after: int | None = None
    for _ in range(4):  # three pages of at most 3, then an empty one
        page = await store.get_chat_messages(chat.chat_uuid, after=after, limit=3)
        if not page:
            break
        seen.extend(contents(page))
        after = page[-1].seq

    assert seen == [str(i) for i in range(7)]
    iterated: list[str] = []
    async for message in store.messages.iter_chat_messages(chat.chat_uuid, page_size=2):
        iterated.append(message.content)
        if len(iterated) > len(seen):
            break
    assert iterated == seen


@pytest.mark.parametrize("limit", [0, -5, MAX_PAGE_SIZE + 1])
async def test_get_chat_messages_rejects_an_invalid_limit(
    store: Store, make_chat: MakeChat, limit: int
) -> None:
    chat = await make_chat()
    with pytest.raises(InvalidInputError):
        await store.get_chat_messages(chat.chat_uuid, limit=limit)


async def test_get_last_messages_maps_only_chats_with_messages(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    busy, quiet, empty = await make_chat(), await make_chat(), await make_chat()
    await add_message(busy, "first")
    newest = await add_message(busy, "second")
    only = await add_message(quiet, "only")
    await add_message(await make_chat(), "not asked for")
    unknown = uuid.uuid4()

    last = await repo.get_last_messages([busy.chat_uuid, quiet.chat_uuid, empty.chat_uuid, unknown])

    assert last == {busy.chat_uuid: newest, quiet.chat_uuid: only}
    assert await repo.get_last_messages([]) == {}


# --- the message tree ------------------------------------------------------------------------


async def test_messages_chain_onto_the_active_leaf_by_default(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    first = await add_message(chat, "1")
    second = await add_message(chat, "2")
    third = await add_message(chat, "3")

    assert first.parent_uuid is None
    assert second.parent_uuid == first.message_uuid
    assert third.parent_uuid == second.message_uuid
    stored = await stored_chat(repo, chat)
    assert stored is not None and stored.active_leaf_uuid == third.message_uuid


async def test_an_explicit_earlier_parent_starts_a_branch_that_becomes_active(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    question = await add_message(chat, "question", role=Role.USER)
    answer = await add_message(chat, "answer")
    await add_message(chat, "follow-up", role=Role.USER)

    regenerated = await add_message(chat, "better answer", parent_uuid=question.message_uuid)

    assert regenerated.parent_uuid == question.message_uuid
    assert contents(await repo.get_chat_messages(chat.chat_uuid)) == ["question", "better answer"]
    stored = await stored_chat(repo, chat)
    assert stored is not None and stored.active_leaf_uuid == regenerated.message_uuid
    assert await repo.get_last_messages([chat.chat_uuid]) == {chat.chat_uuid: regenerated}
    # The old branch is kept, not deleted.
    assert await repo.get_message(answer.message_uuid) == answer
    continued = await add_message(chat, "thanks", role=Role.USER)
    assert continued.parent_uuid == regenerated.message_uuid


async def test_set_active_leaf_switches_the_branch_the_history_follows(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    _, old_leaf, new_leaf = await two_branches(chat, add_message)

    switched = await store.branches.set_active_leaf(chat.chat_uuid, old_leaf.message_uuid)

    assert switched is not None and switched.active_leaf_uuid == old_leaf.message_uuid
    assert contents(await store.get_chat_messages(chat.chat_uuid)) == ["root", "a1", "a2"]
    assert await store.get_last_messages([chat.chat_uuid]) == {chat.chat_uuid: old_leaf}
    appended = await add_message(chat, "a3")
    assert appended.parent_uuid == old_leaf.message_uuid

    await store.branches.set_active_leaf(chat.chat_uuid, new_leaf.message_uuid)
    assert contents(await store.get_chat_messages(chat.chat_uuid)) == ["root", "b1"]


async def test_set_active_leaf_to_an_inner_message_shortens_the_history(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    first = await add_message(chat, "1")
    await add_message(chat, "2")

    await store.branches.set_active_leaf(chat.chat_uuid, first.message_uuid)

    assert contents(await store.get_chat_messages(chat.chat_uuid)) == ["1"]


async def test_pagination_follows_the_active_branch(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    root, _, b1 = await two_branches(chat, add_message)
    await add_message(chat, "b2")

    assert contents(await store.get_chat_messages(chat.chat_uuid, after=root.seq)) == ["b1", "b2"]
    assert contents(await store.get_chat_messages(chat.chat_uuid, limit=2)) == ["root", "b1"]
    assert contents(await store.get_chat_messages(chat.chat_uuid, before=b1.seq)) == ["root"]


async def test_a_parent_from_another_chat_or_unknown_is_rejected(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat, mine = await check_rejects_foreign_and_unknown(
        make_chat, add_message, lambda chat, parent: add_message(chat, "x", parent_uuid=parent)
    )
    assert contents(await repo.get_chat_messages(chat.chat_uuid)) == ["mine"]
    assert (await repo.get_last_messages([chat.chat_uuid]))[chat.chat_uuid] == mine
