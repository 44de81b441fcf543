"""The SQLite store reuses a history it read while the chat's version is unchanged.

Every write that changes what ``get_chat_messages`` returns must make the next read
see it, in this store or in another one on the same file (another process), and
what a read returns must never alias what the cache keeps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from uuid import uuid4

import pytest

from threadstore import (
    Chat,
    ChatCreate,
    MessageCreate,
    MessageReasoningCreate,
    MessageReasoningUpdate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    open_store,
)
from threadstore.store.sqlite import SQLiteStore


@pytest.fixture
async def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cache.db'}"


@pytest.fixture
async def store(db: str) -> AsyncIterator[SQLiteStore]:
    opened = await open_store(db)
    assert isinstance(opened, SQLiteStore)
    try:
        yield opened
    finally:
        await opened.close()


async def _chat_with_history(store: SQLiteStore) -> tuple[Chat, list[str]]:
    chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
    contents = ["hello", "hi there", "how are you?"]
    for index, text in enumerate(contents):
        role = "user" if index % 2 == 0 else "assistant"
        await store.create_message(
            MessageCreate(chat_uuid=chat.chat_uuid, role=role, content=text, run_id="r1")
        )
    return chat, contents


class _Statements:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, statement: str) -> None:
        if not statement.startswith("--"):  # trigger bodies are reported as comments
            self.count += 1


async def test_a_repeated_read_is_one_statement_and_returns_the_same_history(
    store: SQLiteStore,
) -> None:
    chat, _ = await _chat_with_history(store)
    first = await store.get_chat_messages(chat.chat_uuid)

    counter = _Statements()
    await store.set_trace_callback(counter)
    second = await store.get_chat_messages(chat.chat_uuid)
    await store.set_trace_callback(None)

    assert second == first
    assert counter.count == 1


Write = Callable[[SQLiteStore, Chat], Awaitable[object]]


async def _append(store: SQLiteStore, chat: Chat) -> object:
    return await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="new"))


async def _edit(store: SQLiteStore, chat: Chat) -> object:
    last = (await store.get_chat_messages(chat.chat_uuid))[-1]
    return await store.update_message(last.message_uuid, MessageUpdate(content="edited"))


async def _add_tool_call(store: SQLiteStore, chat: Chat) -> object:
    last = (await store.get_chat_messages(chat.chat_uuid))[-1]
    return await store.create_message_tool_call(
        MessageToolCallCreate(message_uuid=last.message_uuid, tool_call_id="c1", name="add")
    )


async def _answer_tool_call(store: SQLiteStore, chat: Chat) -> object:
    last = (await store.get_chat_messages(chat.chat_uuid))[-1]
    call = await store.create_message_tool_call(
        MessageToolCallCreate(message_uuid=last.message_uuid, tool_call_id="c1", name="add")
    )
    await store.get_chat_messages(chat.chat_uuid)  # cache the history with the call open
    return await store.update_message_tool_call(call.uuid, MessageToolCallUpdate(content="3"))


async def _add_reasoning(store: SQLiteStore, chat: Chat) -> object:
    last = (await store.get_chat_messages(chat.chat_uuid))[-1]
    return await store.create_message_reasoning(
        MessageReasoningCreate(message_uuid=last.message_uuid, content="hmm")
    )


async def _edit_reasoning(store: SQLiteStore, chat: Chat) -> object:
    last = (await store.get_chat_messages(chat.chat_uuid))[-1]
    step = await store.create_message_reasoning(
        MessageReasoningCreate(message_uuid=last.message_uuid, content="hmm")
    )
    await store.get_chat_messages(chat.chat_uuid)
    return await store.update_message_reasoning(step.uuid, MessageReasoningUpdate(content="aha"))


async def _switch_branch(store: SQLiteStore, chat: Chat) -> object:
    first = (await store.get_chat_messages(chat.chat_uuid))[0]
    return await store.branches.set_active_leaf(chat.chat_uuid, first.message_uuid)


async def _finalize(store: SQLiteStore, chat: Chat) -> object:
    return await store.finalize_run_records(chat.chat_uuid, "r1", MessageStatus.INTERRUPTED)


async def _delete(store: SQLiteStore, chat: Chat) -> object:
    return await store.delete_chat(chat.chat_uuid)


WRITES: dict[str, Write] = {
    "append": _append,
    "edit": _edit,
    "add_tool_call": _add_tool_call,
    "answer_tool_call": _answer_tool_call,
    "add_reasoning": _add_reasoning,
    "edit_reasoning": _edit_reasoning,
    "switch_branch": _switch_branch,
    "finalize": _finalize,
    "delete": _delete,
}


def _shape(messages: object) -> object:
    return [
        (m.content, m.status, [(t.content, t.arguments) for t in m.tool_calls],
         [r.content for r in m.reasonings])
        for m in messages  # type: ignore[attr-defined]
    ]  # fmt: skip


@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("writer", ["same_store", "other_store"])
async def test_every_write_is_seen_by_the_next_read(
    store: SQLiteStore, db: str, write: str, writer: str
) -> None:
    chat, _ = await _chat_with_history(store)
    await store.get_chat_messages(chat.chat_uuid)  # cached now

    if writer == "same_store":
        await WRITES[write](store, chat)
    else:
        other = await open_store(db, history_cache_messages=0)
        try:
            await WRITES[write](other, chat)  # type: ignore[arg-type]
        finally:
            await other.close()

    uncached = await open_store(db, history_cache_messages=0)
    try:
        truth = await uncached.get_chat_messages(chat.chat_uuid)
    finally:
        await uncached.close()
    assert _shape(await store.get_chat_messages(chat.chat_uuid)) == _shape(truth)


async def test_a_rolled_back_write_never_leaks_into_a_later_read(store: SQLiteStore) -> None:
    chat, contents = await _chat_with_history(store)
    await store.get_chat_messages(chat.chat_uuid)

    with pytest.raises(RuntimeError):
        async with store.transaction():
            await _append(store, chat)
            inside = await store.get_chat_messages(chat.chat_uuid)
            assert [m.content for m in inside] == [*contents, "new"]
            raise RuntimeError("roll back")

    # A later commit brings the chat to the version the rolled-back write had reached.
    await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="committed"))
    after = await store.get_chat_messages(chat.chat_uuid)
    assert [m.content for m in after] == [*contents, "committed"]


async def test_what_a_read_returns_can_be_changed_without_touching_the_store(
    store: SQLiteStore,
) -> None:
    chat, contents = await _chat_with_history(store)
    last = (await store.get_chat_messages(chat.chat_uuid))[-1]
    await store.create_message_tool_call(
        MessageToolCallCreate(message_uuid=last.message_uuid, tool_call_id="c1", name="add")
    )
    first = await store.get_chat_messages(chat.chat_uuid)
    first[0].content = "mutated"
    first[0].metadata["x"] = 1
    first[-1].tool_calls[0].name = "mutated"
    first[-1].tool_calls.clear()

    again = await store.get_chat_messages(chat.chat_uuid)
    assert [m.content for m in again] == contents
    assert again[0].metadata == {}
    assert [t.name for t in again[-1].tool_calls] == ["add"]


async def test_the_cache_can_be_turned_off(db: str) -> None:
    store = await open_store(db, history_cache_messages=0)
    try:
        assert isinstance(store, SQLiteStore)
        assert store.history_cache is None
        chat, contents = await _chat_with_history(store)
        assert [m.content for m in await store.get_chat_messages(chat.chat_uuid)] == contents
    finally:
        await store.close()


async def test_a_chat_created_again_under_the_same_uuid_reads_its_own_history(
    store: SQLiteStore, db: str
) -> None:
    chat, _ = await _chat_with_history(store)
    await store.get_chat_messages(chat.chat_uuid)  # cached

    # Another process deletes the chat and creates one with the same uuid and as many
    # writes, so a version counted from zero would match again.
    other = await open_store(db, history_cache_messages=0)
    try:
        await other.delete_chat(chat.chat_uuid)
        again = await other.create_chat(
            ChatCreate(user_uuid=chat.user_uuid, thread_id="t", chat_uuid=chat.chat_uuid)
        )
        for text in ("other", "history", "here"):
            await other.create_message(MessageCreate(chat_uuid=again.chat_uuid, content=text))
    finally:
        await other.close()

    read = await store.get_chat_messages(chat.chat_uuid)
    assert [m.content for m in read] == ["other", "history", "here"]


async def _chat_of(store: SQLiteStore, texts: list[str]) -> Chat:
    chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
    for text in texts:
        await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content=text))
    return chat


async def _contents(store: SQLiteStore, chat: Chat) -> list[str]:
    return [m.content for m in await store.get_chat_messages(chat.chat_uuid)]


async def test_a_full_cache_drops_the_least_recently_read_chat_and_reads_it_right_again(
    db: str,
) -> None:
    # Room for four messages: two chats of three cannot both be kept.
    store = await open_store(db, history_cache_messages=4)
    other = await open_store(db, history_cache_messages=0)  # another process's writes
    try:
        assert isinstance(store, SQLiteStore) and store.history_cache is not None
        cache = store.history_cache
        a = await _chat_of(store, ["a1", "a2", "a3"])
        b = await _chat_of(store, ["b1", "b2", "b3"])

        assert await _contents(store, a) == ["a1", "a2", "a3"]
        assert await _contents(store, b) == ["b1", "b2", "b3"]  # a is dropped to keep b
        assert (cache.misses, cache.hits) == (2, 0)
        assert await _contents(store, b) == ["b1", "b2", "b3"]
        assert (cache.misses, cache.hits) == (2, 1)  # b was kept

        # While a is not kept, another process appends to it and edits it in place.
        await other.create_message(MessageCreate(chat_uuid=a.chat_uuid, content="a4"))
        (first, *_) = await other.get_chat_messages(a.chat_uuid)
        await other.update_message(first.message_uuid, MessageUpdate(content="a1, edited"))

        assert await _contents(store, a) == ["a1, edited", "a2", "a3", "a4"]
        assert (cache.misses, cache.hits) == (3, 1)  # read whole: a was dropped
        assert await _contents(store, a) == ["a1, edited", "a2", "a3", "a4"]
        assert (cache.misses, cache.hits) == (3, 2)  # a (four messages) is kept now...
        assert await _contents(store, b) == ["b1", "b2", "b3"]
        assert cache.misses == 4  # ...and b went to make room for it
    finally:
        await other.close()
        await store.close()


async def test_a_chat_that_outgrows_the_cache_is_no_longer_kept_and_reads_right(
    db: str,
) -> None:
    store = await open_store(db, history_cache_messages=4)
    try:
        assert isinstance(store, SQLiteStore) and store.history_cache is not None
        cache = store.history_cache
        small = await _chat_of(store, ["s1"])
        chat = await _chat_of(store, ["m1", "m2", "m3"])
        assert await _contents(store, small) == ["s1"]
        assert await _contents(store, chat) == ["m1", "m2", "m3"]  # both kept: 4 messages
        assert await _contents(store, small) == ["s1"]
        assert (cache.misses, cache.hits) == (2, 1)

        # Two appends make five messages: more than the cache holds, so it lets go of it.
        await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="m4"))
        await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="m5"))
        assert await _contents(store, chat) == ["m1", "m2", "m3", "m4", "m5"]
        assert await _contents(store, chat) == ["m1", "m2", "m3", "m4", "m5"]
        assert cache.entry(chat.chat_uuid) is None
        # The chat read whole each time; the small one, untouched, is still kept.
        assert await _contents(store, small) == ["s1"]
        assert cache.hits == 2 and cache.entry(small.chat_uuid) is not None
    finally:
        await store.close()


async def test_a_chat_read_again_is_kept_before_one_read_less_recently(db: str) -> None:
    store = await open_store(db, history_cache_messages=4)
    try:
        assert isinstance(store, SQLiteStore) and store.history_cache is not None
        cache = store.history_cache
        p, q, r = [await _chat_of(store, [f"{n}1", f"{n}2"]) for n in "pqr"]
        assert await _contents(store, p) == ["p1", "p2"]
        assert await _contents(store, q) == ["q1", "q2"]
        assert await _contents(store, p) == ["p1", "p2"]  # p is the most recently read now
        assert await _contents(store, r) == ["r1", "r2"]  # room for r: q goes, not p
        assert (cache.misses, cache.hits) == (3, 1)
        assert await _contents(store, p) == ["p1", "p2"]
        assert (cache.misses, cache.hits) == (3, 2)
        assert await _contents(store, q) == ["q1", "q2"]
        assert (cache.misses, cache.hits) == (4, 2)
    finally:
        await store.close()
