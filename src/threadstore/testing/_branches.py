"""Contract: branches — edit (the first message too), regenerate, siblings, switch, fork,
chat metadata, and bytes anywhere in JSON fields; the full Store API only."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from threadstore import (
    ChatCreate,
    InvalidInputError,
    MessageCreate,
    NotFoundError,
    Store,
)
from threadstore.models import MediaPart, MessageUpdate, Role
from threadstore.testing._suite import NOT_UTF8, AddMessage, MakeChat, OpenStore, add_tool_call


async def _contents(store: Store, chat_uuid: uuid.UUID) -> list[str | None]:
    return [message.content for message in await store.get_chat_messages(chat_uuid)]


async def _three_branches(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> dict[str, Any]:
    """A chat whose first message was edited and whose answer was regenerated twice.

    Tree: q1 -> a1 ; q1' -> a1' | a1'' | a1''' (q1' a second root).
    """
    chat = await make_chat()
    q1 = await add_message(chat, "Hi", role=Role.USER)
    a1 = await add_message(chat, "Hello!", role=Role.ASSISTANT)
    q2 = await store.branches.edit_message(
        q1.message_uuid, MessageCreate(content="Hi there", role=Role.USER)
    )
    answers = [await add_message(chat, "Answer 1", role=Role.ASSISTANT)]
    for text in ("Answer 2", "Answer 3"):
        turn = await store.branches.branch_for_regenerate(chat.chat_uuid, answers[-1].message_uuid)
        assert turn == q2.message_uuid
        answers.append(await add_message(chat, text, role=Role.ASSISTANT))
    return {"chat": chat, "q1": q1, "a1": a1, "q2": q2, "answers": answers}


async def test_editing_the_first_message_starts_a_second_root(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    first = await add_message(chat, "Hi", role=Role.USER)
    await add_message(chat, "Hello!", role=Role.ASSISTANT)

    edited = await store.branches.edit_message(
        first.message_uuid, MessageCreate(content="Hi there", role=Role.USER)
    )

    assert edited.parent_uuid is None
    assert await _contents(store, chat.chat_uuid) == ["Hi there"]
    siblings = await store.branches.get_siblings(chat.chat_uuid, edited.message_uuid)
    assert (siblings.index, siblings.siblings) == (1, (first.message_uuid, edited.message_uuid))
    # The old version and its answer are still there, one switch away.
    await store.branches.switch_branch(chat.chat_uuid, first.message_uuid)
    assert await _contents(store, chat.chat_uuid) == ["Hi", "Hello!"]


async def test_edit_regenerate_twice_and_switch_between_three_branches(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    tree = await _three_branches(store, make_chat, add_message)
    chat_uuid, answers = tree["chat"].chat_uuid, tree["answers"]

    assert await _contents(store, chat_uuid) == ["Hi there", "Answer 3"]
    points = await store.branches.get_branch_points(
        chat_uuid, [tree["q2"].message_uuid, answers[2].message_uuid]
    )
    assert points[answers[2].message_uuid].siblings == tuple(a.message_uuid for a in answers)
    assert (points[answers[2].message_uuid].index, points[answers[2].message_uuid].count) == (2, 3)
    assert points[tree["q2"].message_uuid].count == 2

    for index, answer in enumerate(answers):
        chat = await store.branches.switch_branch(chat_uuid, answer.message_uuid)
        assert chat.active_leaf_uuid == answer.message_uuid
        assert await _contents(store, chat_uuid) == ["Hi there", f"Answer {index + 1}"]
    # Switching to a turn shows its newest continuation.
    await store.branches.switch_branch(chat_uuid, tree["q2"].message_uuid)
    assert await _contents(store, chat_uuid) == ["Hi there", "Answer 3"]
    await store.branches.switch_branch(chat_uuid, tree["q1"].message_uuid)
    assert await _contents(store, chat_uuid) == ["Hi", "Hello!"]


async def test_a_chat_that_branched_is_never_linear(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    # A store may not know a chat never branched (False), but may never say it of one
    # that did: the export trusts it to skip the tree.
    regenerated, edited, switched = await make_chat(), await make_chat(), await make_chat()
    questions = {}
    for chat in (regenerated, edited, switched):
        questions[chat.chat_uuid] = await add_message(chat, "Hi", role=Role.USER)
        await add_message(chat, "Hello!", role=Role.ASSISTANT)
    turn = questions[regenerated.chat_uuid].message_uuid
    await store.branches.branch_for_regenerate(regenerated.chat_uuid, turn)
    await add_message(regenerated, "Hello again", role=Role.ASSISTANT)
    await store.branches.edit_message(
        questions[edited.chat_uuid].message_uuid, MessageCreate(content="Hey", role=Role.USER)
    )
    await store.branches.set_active_leaf(
        switched.chat_uuid, questions[switched.chat_uuid].message_uuid
    )

    for chat in (regenerated, edited, switched):
        assert not await store.branches.is_linear(chat.chat_uuid)
    assert not await store.branches.is_linear(uuid.uuid4())


async def test_a_message_without_siblings_is_no_branch_point(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    only = await add_message(chat, "Hi", role=Role.USER)

    assert await store.branches.get_branch_points(chat.chat_uuid, [only.message_uuid]) == {}
    siblings = await store.branches.get_siblings(chat.chat_uuid, only.message_uuid)
    assert (siblings.index, siblings.count) == (0, 1)


async def test_branch_points_of_any_messages_agree_with_the_whole_tree(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    tree = await _three_branches(store, make_chat, add_message)
    chat_uuid = tree["chat"].chat_uuid
    # A later turn under the newest answer, and a fourth answer on the first branch.
    await add_message(tree["chat"], "And then?", role=Role.USER)
    await store.branches.branch_for_regenerate(chat_uuid, tree["a1"].message_uuid)
    await add_message(tree["chat"], "Hello again!", role=Role.ASSISTANT)
    nodes = await store.branches.get_message_tree(chat_uuid)
    groups: dict[uuid.UUID | None, list[uuid.UUID]] = {}
    for node in nodes:
        groups.setdefault(node.parent_uuid, []).append(node.message_uuid)
    expected = {
        node.message_uuid: tuple(groups[node.parent_uuid])
        for node in nodes
        if len(groups[node.parent_uuid]) > 1
    }
    every = [node.message_uuid for node in nodes]

    for wanted in (every, every[:2], every[-2:], [every[3]], []):
        points = await store.branches.get_branch_points(chat_uuid, wanted)
        assert {u: p.siblings for u, p in points.items()} == {
            u: expected[u] for u in wanted if u in expected
        }
        assert all(p.siblings[p.index] == u for u, p in points.items())


async def test_fork_copies_the_prefix_into_a_new_chat_with_its_lineage(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    tree = await _three_branches(store, make_chat, add_message)
    source, answers = tree["chat"], tree["answers"]
    await add_tool_call(store, answers[1], "c1")

    fork = await store.branches.fork_chat(
        source.chat_uuid, answers[1].message_uuid, thread_id="forked"
    )

    assert fork.chat_uuid != source.chat_uuid and fork.thread_id == "forked"
    assert fork.user_uuid == source.user_uuid
    assert fork.forked_from_chat_uuid == source.chat_uuid
    assert fork.forked_from_message_uuid == answers[1].message_uuid
    history = await store.get_chat_messages(fork.chat_uuid)
    assert [m.content for m in history] == ["Hi there", "Answer 2"]
    assert [c.tool_call_id for c in history[1].tool_calls] == ["c1"]
    assert not {m.message_uuid for m in history} & {a.message_uuid for a in answers}
    # The source is untouched, and deleting it leaves the fork whole.
    assert await _contents(store, source.chat_uuid) == ["Hi there", "Answer 3"]
    await store.delete_chat(source.chat_uuid)
    assert await _contents(store, fork.chat_uuid) == ["Hi there", "Answer 2"]


async def test_branch_operations_refuse_foreign_and_unsuitable_messages(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat, other = await make_chat(), await make_chat()
    question = await add_message(chat, "Hi", role=Role.USER)
    answer = await add_message(chat, "Hello", role=Role.ASSISTANT)
    elsewhere = await add_message(other, "x", role=Role.USER)

    with pytest.raises(NotFoundError):
        await store.branches.switch_branch(chat.chat_uuid, elsewhere.message_uuid)
    with pytest.raises(NotFoundError):
        await store.branches.fork_chat(chat.chat_uuid, elsewhere.message_uuid)
    with pytest.raises(NotFoundError):
        await store.branches.get_siblings(chat.chat_uuid, elsewhere.message_uuid)
    with pytest.raises(InvalidInputError):
        await store.branches.edit_message(answer.message_uuid, MessageCreate(content="no"))
    with pytest.raises(InvalidInputError):
        await store.branches.create_root_message(
            MessageCreate(chat_uuid=chat.chat_uuid, parent_uuid=question.message_uuid)
        )
    assert await _contents(store, chat.chat_uuid) == ["Hi", "Hello"]


async def test_update_chat_metadata_replaces_it_whole(store: Store, make_chat: MakeChat) -> None:
    chat = await make_chat(metadata={"a": 1, "b": 2})

    updated = await store.chats.update_chat_metadata(chat.chat_uuid, {"b": 3, "blob": NOT_UTF8})

    assert updated is not None and updated.metadata == {"b": 3, "blob": NOT_UTF8}
    stored = await store.chats.get_chat(chat.chat_uuid)
    assert stored is not None and stored.metadata == {"b": 3, "blob": NOT_UTF8}
    assert await store.chats.update_chat_metadata(uuid.uuid4(), {}) is None


async def test_bytes_anywhere_in_json_fields_read_back_as_bytes(
    store: Store, add_message: AddMessage
) -> None:
    chat = await store.create_chat(
        ChatCreate(
            user_uuid=uuid.uuid4(),
            thread_id="t",
            state={"snapshot": [NOT_UTF8]},
            metadata={"icon": NOT_UTF8},
        )
    )
    part = MediaPart(type="image", data=NOT_UTF8, metadata={"thumb": NOT_UTF8})
    message = await add_message(
        chat,
        "look",
        content_parts=[part],
        metadata={"raw": {"nested": [NOT_UTF8]}},
        activity_content={"frame": NOT_UTF8},
    )
    # A plain payload shaped like the tag stays plain data.
    look_alike = {"$deuzBytes": "aGk="}
    await store.update_message(
        message.message_uuid, MessageUpdate(metadata={"raw": NOT_UTF8, "data": look_alike})
    )
    await store.update_chat_state(chat.chat_uuid, {"snapshot": NOT_UTF8, "x": look_alike})

    stored_chat = await store.chats.get_chat(chat.chat_uuid)
    assert stored_chat is not None
    assert stored_chat.metadata == {"icon": NOT_UTF8}
    assert stored_chat.state == {"snapshot": NOT_UTF8, "x": look_alike}
    (stored,) = await store.get_chat_messages(chat.chat_uuid)
    assert stored.metadata == {"raw": NOT_UTF8, "data": look_alike}
    assert stored.content_parts == [part]
    assert stored.activity_content == {"frame": NOT_UTF8}


async def test_export_then_import_reproduces_every_branch_and_the_lineage(
    store: Store, make_chat: MakeChat, add_message: AddMessage, open_test_store: OpenStore
) -> None:
    from threadstore.transfer import ChatExport, export_chat, import_chat

    tree = await _three_branches(store, make_chat, add_message)
    answers = tree["answers"]
    fork = await store.branches.fork_chat(tree["chat"].chat_uuid, answers[1].message_uuid)
    await store.branches.switch_branch(fork.chat_uuid, fork.active_leaf_uuid or uuid.uuid4())
    await add_message(fork, "Follow-up", role=Role.USER, metadata={"blob": NOT_UTF8})
    await store.branches.switch_branch(tree["chat"].chat_uuid, answers[0].message_uuid)
    other = await open_test_store()
    owner = uuid.uuid4()

    for source in (tree["chat"], fork):
        chat = await store.chats.get_chat(source.chat_uuid)
        assert chat is not None
        text = (await export_chat(store, chat)).model_dump_json()
        imported = await import_chat(other, ChatExport.model_validate_json(text), user_uuid=owner)
        assert imported.forked_from_chat_uuid == chat.forked_from_chat_uuid
        assert imported.forked_from_message_uuid == chat.forked_from_message_uuid
        assert await _contents(other, imported.chat_uuid) == await _contents(store, chat.chat_uuid)
        # Same tree shape: same contents under the same parents' contents.
        assert await _shape(other, imported.chat_uuid) == await _shape(store, chat.chat_uuid)

    imported_fork = await other.get_chat_by_thread_id(owner, fork.thread_id)
    assert imported_fork is not None
    (*_, follow_up) = await other.get_chat_messages(imported_fork.chat_uuid)
    assert follow_up.metadata == {"blob": NOT_UTF8}
    imported_chat = await other.get_chat_by_thread_id(owner, tree["chat"].thread_id)
    assert imported_chat is not None
    (_, answer) = await other.get_chat_messages(imported_chat.chat_uuid)
    siblings = await other.branches.get_siblings(imported_chat.chat_uuid, answer.message_uuid)
    assert (siblings.index, siblings.count) == (0, 3)
    await other.branches.switch_branch(imported_chat.chat_uuid, siblings.siblings[2])
    assert await _contents(other, imported_chat.chat_uuid) == ["Hi there", "Answer 3"]


async def _shape(store: Store, chat_uuid: uuid.UUID) -> list[tuple[str | None, str | None]]:
    """(content, parent's content) of every message, in creation order."""
    nodes = await store.branches.get_message_tree(chat_uuid)
    content = {}
    for node in nodes:
        message = await store.get_message(node.message_uuid)
        assert message is not None
        content[node.message_uuid] = message.content
    return [
        (content[n.message_uuid], content[n.parent_uuid] if n.parent_uuid else None) for n in nodes
    ]
