"""Contract: full-text search — what matches, whose, on which branch, in which order, in
pages; the full Store API only."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from threadstore import (
    InvalidInputError,
    MessageCreate,
    Store,
)
from threadstore.models import (
    MessageToolCallUpdate,
    MessageUpdate,
    RetentionPolicy,
    Role,
    SearchHit,
    utcnow,
)
from threadstore.testing._suite import AddMessage, MakeChat, add_reasoning, add_tool_call


def _marked(hit: SearchHit) -> list[str]:
    """The highlighted words of a hit's snippet, lower-cased."""
    return [hit.snippet[start:end].lower() for start, end in hit.highlights]


async def test_search_finds_text_tool_calls_and_reasoning_with_highlights(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat(name="Baking")
    question = await add_message(chat, "How do I bake sourdough bread?", role=Role.USER)
    answer = await add_message(chat, "", role=Role.ASSISTANT)
    await add_tool_call(store, answer, "call-1", "recipe_lookup", arguments='{"dish": "focaccia"}')
    await add_reasoning(store, answer, content="They want rye flour, probably.")

    page = await store.search(chat.user_uuid, "Sourdough BREAD")
    (hit,) = page.items
    assert (hit.message_uuid, hit.chat_uuid, hit.kind, hit.role) == (
        question.message_uuid,
        chat.chat_uuid,
        "text",
        "user",
    )
    assert hit.chat_name == "Baking"
    assert _marked(hit) == ["sourdough", "bread"]
    assert page.next_cursor is None

    (tool,) = (await store.messages.search(chat.user_uuid, "focaccia")).items
    assert (tool.message_uuid, tool.kind) == (answer.message_uuid, "tool")
    assert _marked(tool) == ["focaccia"]
    (named,) = (await store.search(chat.user_uuid, "recipe")).items
    assert named.kind == "tool"
    (thought,) = (await store.search(chat.user_uuid, "rye flour")).items
    assert (thought.message_uuid, thought.kind) == (answer.message_uuid, "reasoning")
    assert (await store.search(chat.user_uuid, "sourdough focaccia")).items == []


async def test_search_sees_updates_in_the_write_that_made_them(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    answer = await add_message(chat, "Let me check", role=Role.ASSISTANT)
    call = await add_tool_call(store, answer, name="weather", arguments="{}")
    await store.update_message(answer.message_uuid, MessageUpdate(content="It is sunny"))
    await store.update_message_tool_call(call.uuid, MessageToolCallUpdate(content="drizzle"))

    assert (await store.search(chat.user_uuid, "check")).items == []
    assert [h.kind for h in (await store.search(chat.user_uuid, "sunny")).items] == ["text"]
    assert [h.kind for h in (await store.search(chat.user_uuid, "drizzle")).items] == ["tool"]


async def test_search_never_returns_another_users_message(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    mine, theirs = await make_chat(), await make_chat()
    await add_message(mine, "secret plans for the garden", role=Role.USER)
    await add_message(theirs, "secret plans for the garden", role=Role.USER)
    await add_message(theirs, f"u{mine.user_uuid.hex} secret", role=Role.USER)

    for query in ("secret", "secret plans", "garden", f"u{mine.user_uuid.hex}"):
        for order in ("newest", "best"):
            hits = (await store.search(theirs.user_uuid, query, order=order)).items
            assert {h.chat_uuid for h in hits} <= {theirs.chat_uuid}, query
            hits = (await store.search(mine.user_uuid, query, order=order)).items
            assert {h.chat_uuid for h in hits} <= {mine.chat_uuid}, query
    assert (await store.search(uuid.uuid4(), "secret")).items == []


async def test_search_reads_the_active_branch_unless_asked_for_all(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    question = await add_message(chat, "name a colour", role=Role.USER)
    first = await add_message(chat, "crimson, I think", role=Role.ASSISTANT)
    await store.branches.branch_for_regenerate(chat.chat_uuid, first.message_uuid)
    second = await add_message(chat, "teal, surely", role=Role.ASSISTANT)

    assert (await store.search(chat.user_uuid, "crimson")).items == []
    every = await store.search(chat.user_uuid, "crimson", all_branches=True)
    assert [h.message_uuid for h in every.items] == [first.message_uuid]
    assert [h.message_uuid for h in (await store.search(chat.user_uuid, "teal")).items] == [
        second.message_uuid
    ]
    hits = await store.search(chat.user_uuid, "colour")
    assert [h.message_uuid for h in hits.items] == [question.message_uuid]

    await store.branches.switch_branch(chat.chat_uuid, first.message_uuid)
    assert [h.message_uuid for h in (await store.search(chat.user_uuid, "crimson")).items] == [
        first.message_uuid
    ]
    assert (await store.search(chat.user_uuid, "teal")).items == []


async def test_deleted_and_erased_chats_are_never_found(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    user = uuid.uuid4()
    soft, hard, other = [await make_chat(user_uuid=user) for _ in range(3)]
    for chat in (soft, hard, other):
        await add_message(chat, "quarterly report draft", role=Role.USER)

    await store.delete_chat(soft.chat_uuid, soft=True)
    await store.delete_chat(hard.chat_uuid)
    hits = (await store.search(user, "quarterly report")).items
    assert [h.chat_uuid for h in hits] == [other.chat_uuid]

    await store.chats.restore_chat(soft.chat_uuid)
    assert len((await store.search(user, "quarterly")).items) == 2
    expiring = await make_chat(user_uuid=user)
    await add_message(expiring, "quarterly report expired", role=Role.USER)
    await store.chats.set_retention_policy(
        RetentionPolicy(idle_ttl=60), chat_uuid=expiring.chat_uuid
    )
    report = await store.chats.sweep_expired(now=utcnow() + timedelta(hours=1))
    assert report.chats == 1
    assert len((await store.search(user, "quarterly")).items) == 2

    await store.chats.forget_user(user)
    assert (await store.search(user, "quarterly")).items == []
    assert await store.messages.search_backlog() == 0


async def test_search_pages_with_a_cursor_once_each_in_either_order(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    user = uuid.uuid4()
    made = []
    for n in range(3):
        chat = await make_chat(user_uuid=user)
        for i in range(4):
            words = " ".join(["apple"] * (1 + (n + i) % 3))
            made.append(await add_message(chat, f"{words} pie number {n}-{i}", role=Role.USER))
    await add_message(await make_chat(user_uuid=user), "no fruit here", role=Role.USER)

    for order in ("newest", "best"):
        seen, cursor = [], None
        while True:
            page = await store.search(user, "apple pie", order=order, limit=5, cursor=cursor)
            assert len(page.items) <= 5
            seen += page.items
            cursor = page.next_cursor
            if cursor is None:
                break
        assert sorted(h.message_uuid for h in seen) == sorted(m.message_uuid for m in made)
        if order == "newest":
            assert [h.message_uuid for h in seen] == [m.message_uuid for m in reversed(made)]
            assert {h.score for h in seen} == {None}
        else:
            scores = [h.score or 0.0 for h in seen]
            assert None not in {h.score for h in seen}
            assert scores == sorted(scores, reverse=True)


async def test_search_queries_are_plain_words_and_bad_ones_are_refused(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    await add_message(chat, 'say "NEAR" and OR (maybe) col:umn* ^start', role=Role.USER)
    for query in ('"NEAR"', "OR", "near(", "col:umn*", "^start", 'a" OR "b', "AND NOT"):
        page = await store.search(chat.user_uuid, query)  # never a syntax error
        assert all(h.chat_uuid == chat.chat_uuid for h in page.items)
    assert len((await store.search(chat.user_uuid, "near maybe")).items) == 1
    for bad in ("", "   ", "!!! ???", "x" * 501, " ".join(f"w{i}" for i in range(17))):
        with pytest.raises(InvalidInputError):
            await store.search(chat.user_uuid, bad)
    with pytest.raises(InvalidInputError):
        await store.search(chat.user_uuid, "near", limit=0)
    with pytest.raises(InvalidInputError):
        await store.search(chat.user_uuid, "near", cursor="not a cursor")
    with pytest.raises(InvalidInputError):
        await store.search(chat.user_uuid, "near", order="oldest")  # type: ignore[arg-type]


async def test_a_fork_is_found_under_its_own_chat(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    message = await add_message(chat, "lighthouse keeper", role=Role.USER)
    fork = await store.branches.fork_chat(chat.chat_uuid, message.message_uuid)
    hits = (await store.search(chat.user_uuid, "lighthouse")).items
    assert sorted(str(h.chat_uuid) for h in hits) == sorted(
        str(c) for c in (chat.chat_uuid, fork.chat_uuid)
    )
    await store.create_message(
        MessageCreate(chat_uuid=fork.chat_uuid, content="lighthouse again", role=Role.USER)
    )
    assert len((await store.search(chat.user_uuid, "lighthouse", limit=2)).items) == 2


async def test_best_match_ranks_the_message_most_about_the_words_first(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    filler = " ".join(f"filler{n}" for n in range(30))
    once = await add_message(chat, f"apple and a pie, {filler}", role=Role.USER)
    often = await add_message(chat, "apple pie, apple pie, apple pie", role=Role.USER)
    newer = await add_message(chat, f"one apple pie {filler}", role=Role.USER)

    best = (await store.search(chat.user_uuid, "apple pie", order="best")).items
    assert best[0].message_uuid == often.message_uuid
    assert {h.message_uuid for h in best} == {
        once.message_uuid,
        often.message_uuid,
        newer.message_uuid,
    }
    newest = (await store.search(chat.user_uuid, "apple pie")).items
    assert newest[0].message_uuid == newer.message_uuid
