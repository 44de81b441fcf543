"""Incremental histories: each fast path against its reference.

A kept history extended by the rows changed since equals a whole read, whatever another
store (another process) wrote meanwhile; the history index and the translation fed in
pieces equal what the whole history gives at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from uuid import uuid4

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_history_window import histories
from threadstore import (
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    Reasoning,
    Role,
    Store,
    ToolCall,
    open_store,
)
from threadstore.codec import TRANSLATION, KeptTranslation
from threadstore.codec._messages import HistoryTranslator, translate_messages
from threadstore.fold import HistoryIndex, pending_tool_calls, stored_ids
from threadstore.store._history import HistoryCache

CHAT = uuid4()


@st.composite
def replayed_histories(draw: st.DrawFn) -> list[Message]:
    """Histories with what a replay treats apart: sub-agents, errors, reasoning alone, reused ids.

    A sub-agent's call left without a result (replayed with an error result), calls
    still in progress, answered by a tool message or failed; assistant messages that
    only hold reasoning (replayed as the reasoning alone); ids reused across records.
    """
    messages: list[Message] = []
    ids = st.sampled_from(["a", "b", "c", "call0", "call0-result", "r0"])
    text = st.text(alphabet="ab ", max_size=8)
    for n in range(draw(st.integers(0, 10))):
        uuid = uuid4()
        role = draw(st.sampled_from([Role.USER, Role.ASSISTANT, Role.ASSISTANT, Role.TOOL]))
        subagent = draw(st.none() | st.sampled_from(["sub1", "sub2"]))
        agui_id = draw(st.none() | ids | st.just(f"m{n}"))
        metadata: dict[str, object] = {} if subagent is None else {"subagent_run_id": subagent}
        if role is Role.TOOL and draw(st.booleans()):
            metadata["tool_call_id"] = draw(ids)
        message = Message(
            message_uuid=uuid,
            chat_uuid=CHAT,
            role=role,
            agui_id=agui_id,
            content=draw(text),
            seq=n,
            metadata=metadata,
        )
        if role is Role.ASSISTANT:
            for k in range(draw(st.integers(0, 2))):
                message.reasonings.append(
                    Reasoning(
                        uuid=uuid4(),
                        message_uuid=uuid,
                        agui_id=draw(st.none() | ids),
                        content=draw(text),
                        seq=2 * k,
                    )
                )
            for k in range(draw(st.integers(0, 2))):
                content = draw(st.none() | text)
                message.tool_calls.append(
                    ToolCall(
                        uuid=uuid4(),
                        message_uuid=uuid,
                        tool_call_id=draw(ids | st.just(f"t{n}.{k}")),
                        name="lookup",
                        content=content,
                        result_message_id=draw(st.none() | ids),
                        error=draw(st.none() | st.just("failed")),
                        in_progress=draw(st.booleans()),
                        seq=2 * k + 1,
                        metadata=draw(st.just({}) | st.just({"subagent_run_id": "sub3"})),
                    )
                )
        messages.append(message)
    return messages


@settings(max_examples=200, deadline=None)
@given(histories() | replayed_histories(), st.data())
def test_the_index_fed_in_pieces_answers_for_every_prefix_as_the_reference(
    history: list[Message], data: st.DataObject
) -> None:
    index = HistoryIndex()
    translator = HistoryTranslator()
    fed = 0
    while fed < len(history):
        step = data.draw(st.integers(1, len(history) - fed))
        index.feed(history[fed : fed + step])
        translator.feed(history[fed : fed + step])
        fed += step
    assert translator.out == translate_messages(history)
    for length in range(len(history) + 1):
        prefix = history[:length]
        lookup = index.at(length)
        ids = stored_ids(prefix)
        probe = ids | stored_ids(history) | {"nope"}
        assert {i for i in probe if i in lookup.ids} == ids
        assert lookup.pending == pending_tool_calls(prefix)
        for message in history:
            expected = next(
                (
                    m.message_uuid
                    for m in reversed(prefix)
                    if m.agui_id == message.agui_id and m.role == Role.ASSISTANT
                ),
                None,
            )
            if message.agui_id:
                assert lookup.assistant.get(message.agui_id) == expected


def test_a_prefix_answers_with_its_own_call_when_a_later_message_reuses_the_id() -> None:
    def asking(seq: int) -> Message:
        message_uuid = uuid4()
        call = ToolCall(
            uuid=uuid4(), message_uuid=message_uuid, tool_call_id="a", name="lookup", seq=1
        )
        return Message(
            message_uuid=message_uuid,
            chat_uuid=CHAT,
            role=Role.ASSISTANT,
            seq=seq,
            tool_calls=[call],
        )

    history = [asking(0), asking(1)]
    index = HistoryIndex(history)
    # The second call shadows the first for the whole history, not for the first message.
    assert index.at(1).pending == pending_tool_calls(history[:1]) == {"a": history[0].tool_calls[0]}
    assert index.at(2).pending == pending_tool_calls(history) == {"a": history[1].tool_calls[0]}


@pytest.fixture
async def writer(store_url: str) -> AsyncIterator[Store]:
    """A second store on the test's database: another process, as far as the first knows."""
    if store_url.startswith("memory"):
        pytest.skip("a memory store is one process")
    opened = await open_store(store_url, setup=False)
    try:
        yield opened
    finally:
        await opened.close()


async def _truth(store_url: str, chat: Chat) -> list[Message]:
    uncached = await open_store(store_url, setup=False, history_cache_messages=0)
    try:
        return list(await uncached.get_chat_messages(chat.chat_uuid))
    finally:
        await uncached.close()


async def test_a_kept_history_follows_every_kind_of_change_made_elsewhere(
    store: Store, writer: Store, store_url: str
) -> None:
    chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
    created: list[Message] = []
    for n in range(6):
        role = Role.USER if n % 2 == 0 else Role.ASSISTANT
        created.append(
            await writer.create_message(
                MessageCreate(chat_uuid=chat.chat_uuid, role=role, content=f"m{n}", agui_id=f"m{n}")
            )
        )
    cache = store.history_cache
    assert isinstance(cache, HistoryCache)

    async def check(kind: str) -> None:
        got = list(await store.messages.read_history(chat.chat_uuid))
        assert got == await _truth(store_url, chat), kind
        assert list(await store.get_chat_messages(chat.chat_uuid)) == got, kind

    await check("first read")
    call = await writer.create_message_tool_call(
        MessageToolCallCreate(message_uuid=created[-1].message_uuid, tool_call_id="c1", name="f")
    )
    before = cache.extensions
    await check("a tool call on the last message")
    more = await writer.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, content="m6", agui_id="m6")
    )
    await writer.create_message_reasoning(
        MessageReasoningCreate(message_uuid=more.message_uuid, content="thinking")
    )
    await check("appends with children")
    assert cache.extensions >= before + 2

    await writer.update_message_tool_call(
        call.uuid, MessageToolCallUpdate(content="done", status=MessageStatus.COMPLETE)
    )
    await check("a tool result on an earlier message")
    await writer.update_message(created[1].message_uuid, MessageUpdate(content="edited in place"))
    await check("an earlier message changed in place")

    misses = cache.misses
    await writer.branches.edit_message(
        created[2].message_uuid,
        MessageCreate(chat_uuid=chat.chat_uuid, content="m2, edited", agui_id="m2b"),
    )
    await check("an edit: a new branch")
    await writer.branches.switch_branch(chat.chat_uuid, created[2].message_uuid)
    await check("back to the first branch")
    await writer.branches.edit_message(
        created[0].message_uuid,
        MessageCreate(chat_uuid=chat.chat_uuid, content="first, edited", agui_id="m0b"),
    )
    await check("a new root")
    assert cache.misses >= misses + 3

    await writer.delete_chat(chat.chat_uuid)
    assert list(await store.messages.read_history(chat.chat_uuid)) == []


@settings(max_examples=200, deadline=None)
@given(histories() | replayed_histories(), replayed_histories(), st.data())
def test_an_index_and_a_translation_rewound_to_a_prefix_grow_as_built_afresh(
    history: list[Message], tail: list[Message], data: st.DataObject
) -> None:
    # What a tool result given to a kept message does: the history's end is replaced.
    index, translator = HistoryIndex(history), HistoryTranslator()
    translator.feed(history)
    before = (list(translator.out), index.at(len(history)))
    at = data.draw(st.integers(0, len(history)))
    prefix = history[:at]
    if data.draw(st.booleans()):  # the same messages, their calls answered, come first
        answered = [m.model_copy(deep=True) for m in history[at:]]
        for call in (call for m in answered for call in m.tool_calls):
            call.content, call.in_progress = "answered", False
        tail = [*answered, *tail]
    tail = [m.model_copy(update={"seq": len(prefix) + n}) for n, m in enumerate(tail)]

    rewound_index = index.rewound(at, history[at:])
    rewound = translator.rewound(len(translate_messages(prefix)), history[at:])
    rewound_index.feed(tail)
    rewound.feed(tail)

    changed = [*prefix, *tail]
    assert rewound.out == translate_messages(changed)
    fresh = HistoryIndex(changed)
    for length in range(len(changed) + 1):
        ours, reference = rewound_index.at(length), fresh.at(length)
        probe = stored_ids(changed) | stored_ids(history) | {"nope"}
        assert {i for i in probe if i in ours.ids} == {i for i in probe if i in reference.ids}
        assert ours.pending == reference.pending
        for message in (*changed, *history):
            if message.agui_id:
                key = message.agui_id
                assert ours.assistant.get(key) == reference.assistant.get(key)
                assert ours.messages.get(key) == reference.messages.get(key)
    # What was rewound is left as it was: views of the history it came from still use it.
    assert translator.out == before[0] == translate_messages(history)
    lookup = index.at(len(history))
    assert {i for i in stored_ids(history) if i in lookup.ids} == stored_ids(history)
    assert lookup.pending == before[1].pending == pending_tool_calls(history)


@settings(max_examples=100, deadline=None)
@given(histories() | replayed_histories(), st.lists(replayed_histories(), max_size=12), st.data())
def test_a_translation_rewound_again_and_again_is_the_translation_built_afresh(
    history: list[Message], tails: list[list[Message]], data: st.DataObject
) -> None:
    # Tool result after tool result: each rewind keeps the last one's sets as its base,
    # and folds them into a plain set again once its own changes outgrow them.
    translator = HistoryTranslator()
    translator.feed(history)
    current = list(history)
    kept: list[tuple[HistoryTranslator, list[Any]]] = []
    for tail in tails:
        at = data.draw(st.integers(max(0, len(current) - 3), len(current)))
        prefix = current[:at]
        answered = [m.model_copy(deep=True) for m in current[at:]]
        for call in (call for m in answered for call in m.tool_calls):
            call.content, call.in_progress = "answered", False
        added = [*answered, *tail]
        added = [m.model_copy(update={"seq": len(prefix) + n}) for n, m in enumerate(added)]
        kept.append((translator, list(translator.out)))
        translator = translator.rewound(len(translate_messages(prefix)), current[at:])
        translator.feed(added)
        current = [*prefix, *added]
        assert translator.out == translate_messages(current)
    # Every translator rewound from is as it was: views of its history still use it.
    for old, out in kept:
        assert old.out == out


@settings(max_examples=100, deadline=None)
@given(histories() | replayed_histories())
def test_a_kept_translation_reads_as_a_fresh_one_with_few_field_sets(
    history: list[Message],
) -> None:
    kept = KeptTranslation()
    kept.feed(history)
    fresh = translate_messages(history)
    models = [*kept.upto(len(history)), *(c for m in kept.upto(len(history)) for c in _nested(m))]

    assert kept.upto(len(history)) == fresh
    for mine, theirs in zip(kept.upto(len(history)), fresh, strict=True):
        assert mine.model_fields_set == theirs.model_fields_set
        assert mine.model_dump(exclude_unset=True) == theirs.model_dump(exclude_unset=True)
    # One set per combination of set fields, not one per model: what the collector
    # scans of a long chat's kept translation.
    shapes = {(type(m), frozenset(m.model_fields_set)) for m in models}
    assert len({id(m.__pydantic_fields_set__) for m in models}) <= len(shapes)


def _nested(message: Any) -> list[Any]:
    calls = getattr(message, "tool_calls", None) or []
    return [*calls, *(call.function for call in calls)]


async def test_views_of_a_replaced_history_keep_their_translation(store: Store) -> None:
    chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
    answer = await store.create_message(
        MessageCreate(
            chat_uuid=chat.chat_uuid, role=Role.ASSISTANT, content="calling", agui_id="a1"
        )
    )
    call = await store.create_message_tool_call(
        MessageToolCallCreate(message_uuid=answer.message_uuid, tool_call_id="c1", name="f")
    )
    first = await store.messages.read_history(chat.chat_uuid, TRANSLATION)
    before = first.derived(TRANSLATION).upto(len(first))
    # A tool result changes the last message in place (the kept history is replaced and
    # its translation rewound), then the chat grows and is read again, twice.
    await store.update_message_tool_call(call.uuid, MessageToolCallUpdate(content="done"))
    second = await store.messages.read_history(chat.chat_uuid, TRANSLATION)
    await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, role=Role.USER, content="n"))
    third = await store.messages.read_history(chat.chat_uuid, TRANSLATION)

    assert [m.role for m in before] == ["assistant"]
    assert first.derived(TRANSLATION).upto(len(first)) == before
    assert [m.role for m in second.derived(TRANSLATION).upto(len(second))] == ["assistant", "tool"]
    assert third.derived(TRANSLATION).upto(len(third)) == translate_messages(list(third))
