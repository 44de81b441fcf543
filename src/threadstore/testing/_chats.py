"""Contract: chats — idempotent create, scoping, ordering, pagination, rename, state, delete."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest

from threadstore import (
    Chat,
    ChatCreate,
    ChatRepositoryLike,
    InvalidInputError,
    MessageCreate,
    MessageReasoningUpdate,
    MessageRepositoryLike,
    MessageToolCallUpdate,
    Run,
    RunRepositoryLike,
    Store,
)
from threadstore.keys import chat_deduplication_key
from threadstore.models import FORMAT_VERSION
from threadstore.store import MAX_PAGE_SIZE
from threadstore.testing._suite import (
    AddMessage,
    MakeChat,
    OpenStore,
    Repository,
    add_reasoning,
    add_tool_call,
    assert_given_fields,
    check_rejects_foreign_and_unknown,
    stored_chat,
)


async def test_store_satisfies_the_repository_protocols(repo: Repository) -> None:
    assert isinstance(repo, ChatRepositoryLike)
    assert isinstance(repo, MessageRepositoryLike)
    if isinstance(repo, Store):
        assert isinstance(repo, RunRepositoryLike)


# --- create ----------------------------------------------------------------------------------


async def test_create_chat_returns_every_given_field(repo: Repository) -> None:
    user = uuid.uuid4()
    data = ChatCreate(
        user_uuid=user,
        thread_id="thread-1",
        name="Trip planning",
        tenant_id="acme",
        app_id="travel",
        chat_uuid=uuid.uuid4(),
        forked_from_chat_uuid=uuid.uuid4(),
        forked_from_message_uuid=uuid.uuid4(),
        state={"city": "Lisbon", "days": [1, 2]},
        metadata={"source": "web", "tags": ["a", "b"]},
    )

    chat = await repo.create_chat(data)

    assert_given_fields(chat, data)
    assert chat.dedup_key == chat_deduplication_key(user, "thread-1")
    assert chat.active_leaf_uuid is None
    assert chat.format_version == FORMAT_VERSION
    assert chat.created_at.tzinfo is not None
    assert await stored_chat(repo, chat) == chat


async def test_create_chat_defaults_leave_optional_fields_empty(repo: Repository) -> None:
    chat = await repo.create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))

    assert chat.name is None
    assert chat.tenant_id is None and chat.app_id is None
    assert chat.state is None
    assert chat.metadata == {}
    assert await stored_chat(repo, chat) == chat


async def test_create_chat_without_user_uuid_raises_value_error(repo: Repository) -> None:
    with pytest.raises(ValueError, match="user_uuid"):
        await repo.create_chat(ChatCreate(thread_id="thread-1"))
    assert list(await repo.get_all_chats()) == []


async def test_create_chat_without_thread_id_raises_value_error(repo: Repository) -> None:
    user = uuid.uuid4()
    with pytest.raises(ValueError, match="thread_id"):
        await repo.create_chat(ChatCreate(user_uuid=user))
    assert list(await repo.get_all_chats(user)) == []


async def test_create_chat_twice_for_one_user_and_thread_returns_the_first(
    repo: Repository,
) -> None:
    user = uuid.uuid4()
    first = await repo.create_chat(ChatCreate(user_uuid=user, thread_id="t", name="first"))

    again = await repo.create_chat(
        ChatCreate(user_uuid=user, thread_id="t", name="second", chat_uuid=uuid.uuid4())
    )

    assert again == first
    assert list(await repo.get_all_chats(user)) == [first]
    assert await stored_chat(repo, first) == first


async def test_same_thread_id_for_two_users_creates_two_chats(repo: Repository) -> None:
    alice, bob = uuid.uuid4(), uuid.uuid4()

    chat_a = await repo.create_chat(ChatCreate(user_uuid=alice, thread_id="shared"))
    chat_b = await repo.create_chat(ChatCreate(user_uuid=bob, thread_id="shared"))

    assert chat_a.chat_uuid != chat_b.chat_uuid
    assert chat_a.dedup_key != chat_b.dedup_key
    assert await repo.get_chat_by_thread_id(alice, "shared") == chat_a
    assert await repo.get_chat_by_thread_id(bob, "shared") == chat_b


# --- lookups and scoping ---------------------------------------------------------------------


async def test_get_chat_of_unknown_uuid_returns_none(store: Store, make_chat: MakeChat) -> None:
    await make_chat()
    assert await store.chats.get_chat(uuid.uuid4()) is None


async def test_get_chat_by_thread_id_finds_only_the_owners_chat(
    repo: Repository, make_chat: MakeChat
) -> None:
    owner, stranger = uuid.uuid4(), uuid.uuid4()
    chat = await make_chat(owner, "thread-x")

    assert await repo.get_chat_by_thread_id(owner, "thread-x") == chat
    assert await repo.get_chat_by_thread_id(stranger, "thread-x") is None
    assert await repo.get_chat_by_thread_id(owner, "thread-y") is None


async def test_get_all_chats_for_a_user_never_includes_another_users_chats(
    repo: Repository, make_chat: MakeChat
) -> None:
    alice, bob = uuid.uuid4(), uuid.uuid4()
    alices = {(await make_chat(alice)).chat_uuid for _ in range(3)}
    bobs = {(await make_chat(bob)).chat_uuid for _ in range(2)}

    assert {c.chat_uuid for c in await repo.get_all_chats(alice)} == alices
    assert {c.chat_uuid for c in await repo.get_all_chats(bob)} == bobs
    assert {c.chat_uuid for c in await repo.get_all_chats(uuid.uuid4())} == set()
    assert {c.chat_uuid for c in await repo.get_all_chats()} == alices | bobs


async def test_list_chats_never_includes_another_users_chats(
    store: Store, make_chat: MakeChat
) -> None:
    alice, bob = uuid.uuid4(), uuid.uuid4()
    alices = [await make_chat(alice) for _ in range(3)]
    await make_chat(bob)

    page = await store.chats.list_chats(alice)

    assert {c.chat_uuid for c in page.items} == {c.chat_uuid for c in alices}
    assert all(c.user_uuid == alice for c in page.items)
    assert page.next_cursor is None


async def test_list_chats_filters_by_tenant_and_app(store: Store, make_chat: MakeChat) -> None:
    user = uuid.uuid4()
    acme_web = await make_chat(user, tenant_id="acme", app_id="web")
    acme_cli = await make_chat(user, tenant_id="acme", app_id="cli")
    other = await make_chat(user, tenant_id="other", app_id="web")

    by_tenant = await store.chats.list_chats(user, tenant_id="acme")
    by_app = await store.chats.list_chats(user, app_id="web")
    by_both = await store.chats.list_chats(user, tenant_id="acme", app_id="cli")

    assert {c.chat_uuid for c in by_tenant.items} == {acme_web.chat_uuid, acme_cli.chat_uuid}
    assert {c.chat_uuid for c in by_app.items} == {acme_web.chat_uuid, other.chat_uuid}
    assert [c.chat_uuid for c in by_both.items] == [acme_cli.chat_uuid]


# --- ordering and pagination -----------------------------------------------------------------


async def test_chats_are_listed_newest_first(store: Store, make_chat: MakeChat) -> None:
    user = uuid.uuid4()
    created = [await make_chat(user) for _ in range(4)]
    newest_first = [c.chat_uuid for c in reversed(created)]

    assert [c.chat_uuid for c in await store.get_all_chats(user)] == newest_first
    assert [c.chat_uuid for c in (await store.chats.list_chats(user)).items] == newest_first


async def test_appending_a_message_moves_its_chat_to_the_front(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    user = uuid.uuid4()
    oldest, middle, newest = [await make_chat(user) for _ in range(3)]

    await add_message(oldest, "hello again")

    expected = [oldest.chat_uuid, newest.chat_uuid, middle.chat_uuid]
    assert [c.chat_uuid for c in await store.get_all_chats(user)] == expected
    assert [c.chat_uuid for c in (await store.chats.list_chats(user)).items] == expected


@pytest.mark.parametrize("page_size", [1, 2, 7])
async def test_list_chats_cursor_visits_every_chat_exactly_once(
    store: Store, make_chat: MakeChat, add_message: AddMessage, page_size: int
) -> None:
    user = uuid.uuid4()
    chats = [await make_chat(user) for _ in range(9)]
    await add_message(chats[3], "bump")
    expected = [c.chat_uuid for c in await store.get_all_chats(user)]

    expected_pages = -(-len(chats) // page_size)
    seen: list[uuid.UUID] = []
    cursor: str | None = None
    for _ in range(expected_pages):
        page = await store.chats.list_chats(user, limit=page_size, cursor=cursor)
        assert 0 < len(page.items) <= page_size
        seen.extend(c.chat_uuid for c in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break

    assert seen == expected
    assert cursor is None


async def test_list_chats_default_page_holds_a_small_listing(
    store: Store, make_chat: MakeChat
) -> None:
    user = uuid.uuid4()
    for _ in range(3):
        await make_chat(user)

    page = await store.chats.list_chats(user)

    assert len(page.items) == 3
    assert page.next_cursor is None


async def test_list_chats_of_a_user_without_chats_is_empty(store: Store) -> None:
    page = await store.chats.list_chats(uuid.uuid4())
    assert page.items == []
    assert page.next_cursor is None


@pytest.mark.parametrize("limit", [0, -1, MAX_PAGE_SIZE + 1])
async def test_list_chats_rejects_an_invalid_limit(store: Store, limit: int) -> None:
    with pytest.raises(InvalidInputError):
        await store.chats.list_chats(uuid.uuid4(), limit=limit)


@pytest.mark.parametrize(
    "cursor",
    [
        "not a cursor!",
        base64.urlsafe_b64encode(b"no separator").decode(),
        base64.urlsafe_b64encode(b"2024-01-01T00:00:00+00:00|not-a-uuid").decode(),
        base64.urlsafe_b64encode(f"yesterday|{uuid.UUID(int=1)}".encode()).decode(),
    ],
)
async def test_list_chats_rejects_an_invalid_cursor(
    store: Store, make_chat: MakeChat, cursor: str
) -> None:
    user = uuid.uuid4()
    await make_chat(user)
    with pytest.raises(ValueError):
        await store.chats.list_chats(user, cursor=cursor)


# --- rename and state ------------------------------------------------------------------------


async def test_update_chat_name_renames_and_persists(repo: Repository, make_chat: MakeChat) -> None:
    chat = await make_chat(name="old")

    renamed = await repo.update_chat_name(chat.chat_uuid, "new name")

    assert renamed is not None and renamed.name == "new name"
    stored = await stored_chat(repo, chat)
    assert stored is not None and stored.name == "new name"
    assert stored.thread_id == chat.thread_id


async def test_update_chat_name_of_unknown_chat_returns_none(repo: Repository) -> None:
    assert await repo.update_chat_name(uuid.uuid4(), "x") is None


@pytest.mark.parametrize(
    "state",
    [
        {"todo": [{"title": "buy milk", "done": False}], "ünïcode": "✓", "n": 1.5},
        ["a", 1, None, True],
        "just text",
        42,
    ],
)
async def test_update_chat_state_replaces_the_state(
    store: Store, make_chat: MakeChat, state: Any
) -> None:
    chat = await make_chat(state={"old": True})

    updated = await store.update_chat_state(chat.chat_uuid, state)

    assert updated is not None and updated.state == state
    stored = await store.chats.get_chat(chat.chat_uuid)
    assert stored is not None and stored.state == state


async def test_update_chat_state_of_unknown_chat_returns_none(store: Store) -> None:
    assert await store.update_chat_state(uuid.uuid4(), {"a": 1}) is None


async def test_mutating_a_returned_chat_does_not_change_the_stored_chat(
    repo: Repository, make_chat: MakeChat
) -> None:
    chat = await make_chat(state={"items": [1]}, metadata={"k": "v"})

    chat.state["items"].append(2)
    chat.metadata["k"] = "changed"
    chat.name = "changed"
    fetched = await stored_chat(repo, chat)
    assert fetched is not None
    fetched.metadata["other"] = 1
    listed = (await repo.get_all_chats(chat.user_uuid))[0]
    listed.state["items"].clear()

    stored = await stored_chat(repo, chat)
    assert stored is not None
    assert stored.state == {"items": [1]}
    assert stored.metadata == {"k": "v"}
    assert stored.name is None


async def test_mutating_the_create_dto_after_create_does_not_change_the_stored_chat(
    repo: Repository,
) -> None:
    data = ChatCreate(user_uuid=uuid.uuid4(), thread_id="t", state={"a": [1]}, metadata={"k": 1})
    chat = await repo.create_chat(data)

    data.state["a"].append(2)
    data.metadata["k"] = 2

    stored = await stored_chat(repo, chat)
    assert stored is not None
    assert stored.state == {"a": [1]}
    assert stored.metadata == {"k": 1}


# --- delete ----------------------------------------------------------------------------------


async def test_delete_chat_removes_the_chat_and_everything_it_owns(
    repo: Repository, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    kept = await make_chat()
    first = await add_message(chat, "hi", agui_id="m1", run_id="run-1")
    second = await add_message(chat, "calling", agui_id="m2", run_id="run-1")
    tool_call = await add_tool_call(repo, second, "tc1", "search")
    reasoning = await add_reasoning(repo, second, content="thinking")
    kept_message = await add_message(kept, "still here")
    runs = repo if isinstance(repo, RunRepositoryLike) else None
    if runs is not None:
        for each in (chat, kept):
            run = Run(chat_uuid=each.chat_uuid, thread_id=each.thread_id, run_id="run-1")
            await runs.start_run(run)

    deleted = await repo.delete_chat(chat.chat_uuid)

    assert deleted is not None and deleted.chat_uuid == chat.chat_uuid
    assert deleted.thread_id == chat.thread_id
    assert await stored_chat(repo, chat) is None
    assert await repo.get_chat_by_thread_id(chat.user_uuid, chat.thread_id) is None
    assert list(await repo.get_all_chats(chat.user_uuid)) == []
    assert await repo.get_message(first.message_uuid) is None
    assert await repo.get_message(second.message_uuid) is None
    assert await repo.get_message_by_agui_id(chat.chat_uuid, "m1") is None
    assert await repo.get_tool_call_by_agui_id(second.message_uuid, "tc1") is None
    assert (
        await repo.update_message_tool_call(tool_call.uuid, MessageToolCallUpdate(content="r"))
        is None
    )
    assert (
        await repo.update_message_reasoning(reasoning.uuid, MessageReasoningUpdate(content="r"))
        is None
    )
    assert list(await repo.get_chat_messages(chat.chat_uuid)) == []
    assert await repo.get_last_messages([chat.chat_uuid]) == {}
    # The other chat is untouched.
    assert await repo.get_message(kept_message.message_uuid) == kept_message
    if runs is not None:
        assert await runs.get_run(chat.chat_uuid, "run-1") is None
        assert await runs.get_run(kept.chat_uuid, "run-1") is not None


async def test_create_message_for_a_deleted_chat_raises_value_error(
    repo: Repository, make_chat: MakeChat
) -> None:
    chat = await make_chat()
    await repo.delete_chat(chat.chat_uuid)

    with pytest.raises(ValueError):
        await repo.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="late"))
    assert list(await repo.get_chat_messages(chat.chat_uuid)) == []


async def test_delete_chat_of_unknown_chat_returns_none(
    repo: Repository, make_chat: MakeChat
) -> None:
    chat = await make_chat()
    assert await repo.delete_chat(uuid.uuid4()) is None
    assert await repo.delete_chat(chat.chat_uuid) is not None
    assert await repo.delete_chat(chat.chat_uuid) is None


async def test_a_deleted_thread_can_be_started_again_as_a_new_chat(
    repo: Repository, make_chat: MakeChat
) -> None:
    chat = await make_chat(thread_id="again")
    await repo.delete_chat(chat.chat_uuid)

    fresh = await repo.create_chat(ChatCreate(user_uuid=chat.user_uuid, thread_id="again"))

    assert fresh.chat_uuid != chat.chat_uuid
    assert await repo.get_chat_by_thread_id(chat.user_uuid, "again") == fresh


async def test_set_active_leaf_rejects_a_message_of_another_chat(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat, mine = await check_rejects_foreign_and_unknown(
        make_chat,
        add_message,
        lambda chat, leaf: store.branches.set_active_leaf(chat.chat_uuid, leaf),
    )
    stored = await store.chats.get_chat(chat.chat_uuid)
    assert stored is not None and stored.active_leaf_uuid == mine.message_uuid


# --- subclassed chat model -------------------------------------------------------------------


class TeamChat(Chat):
    """A chat with an app-specific field the base schema has no column for."""

    team: str = ""
    avatar: bytes | None = None


class TeamChatCreate(ChatCreate):
    team: str = ""
    avatar: bytes | None = None


async def test_a_chat_subclass_keeps_its_own_fields(open_test_store: OpenStore) -> None:
    store = await open_test_store(chat_model=TeamChat)
    avatar = b"\x89PNG\r\n\x1a\n\xff\xfe\x00"

    created = await store.create_chat(
        TeamChatCreate(user_uuid=uuid.uuid4(), thread_id="t", team="core", avatar=avatar)
    )
    plain = await store.create_chat(ChatCreate(user_uuid=created.user_uuid, thread_id="u"))

    assert isinstance(created, TeamChat)
    assert (created.team, created.avatar) == ("core", avatar)
    stored = await store.chats.get_chat(created.chat_uuid)
    assert isinstance(stored, TeamChat)
    assert (stored.team, stored.avatar) == ("core", avatar)
    renamed = await store.update_chat_name(created.chat_uuid, "renamed")
    assert isinstance(renamed, TeamChat) and renamed.team == "core"
    listed = {c.chat_uuid: c for c in await store.get_all_chats(created.user_uuid)}
    assert isinstance(listed[created.chat_uuid], TeamChat)
    assert listed[created.chat_uuid].avatar == avatar  # type: ignore[attr-defined]
    assert isinstance(plain, TeamChat) and (plain.team, plain.avatar) == ("", None)
