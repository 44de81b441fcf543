"""What a store keeps of a long history is invisible to the cyclic collector, and still freed.

A full collection scans every object the collector tracks, so a long history kept
tracked (its messages, their index and AG-UI translation) makes every full collection of
the process as slow as the history is long. These tests count objects, never time: what
a kept history and what is derived from it hold that the collector tracks does not grow
with the history; dropped, it is freed by reference counting alone; and the rest of the
process (a dropped stream in a reference cycle) is still collected and finalized.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from pydantic import BaseModel

from agui_scripts import collect, run_input, user
from test_long_chats import SQL_BACKENDS, USER, sql_store, storage_agent
from threadstore import (
    ChatCreate,
    Message,
    MessageCreate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    Role,
    Store,
    ToolCall,
)
from threadstore.agui import kept_translation
from threadstore.agui._agent import _facts
from threadstore.store import CreateMessage, CreateToolCall, UpdateToolCall, untrack
from threadstore.store._history_cache import HistoryCache, KeptHistory
from threadstore.store._offload import OFF_LOOP_ITEMS

pytestmark = pytest.mark.skipif(
    not hasattr(__import__("ctypes"), "pythonapi"), reason="needs CPython's C API"
)


def reachable_tracked(*roots: object) -> int:
    """How many objects reachable from ``roots`` through data and threadstore's own
    objects the collector tracks (tracked or not, every one is walked)."""
    seen: set[int] = set()
    stack = list(roots)
    tracked = 0
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        kind = type(item)
        data = kind in (dict, list, tuple, set, frozenset) or isinstance(item, BaseModel | UUID)
        if isinstance(item, Enum) or not (data or kind.__module__.startswith("threadstore")):
            continue  # shared module-level objects (enum members), or not data
        tracked += gc.is_tracked(item)
        stack.extend(o for o in gc.get_referents(item) if not isinstance(o, type))
    return tracked


def history(messages: int) -> list[Message]:
    """A chat's history as a store reads it: user turns and answers that call a tool."""
    chat_uuid, parent, out = uuid4(), None, []
    for index in range(messages):
        message_uuid = uuid4()
        calls = []
        if index % 2:
            calls.append(
                ToolCall(
                    uuid=uuid4(),
                    message_uuid=message_uuid,
                    tool_call_id=f"call{index}",
                    name="lookup",
                    content="found",
                    status=MessageStatus.COMPLETE,
                    in_progress=False,
                    metadata={"n": index},
                )
            )
        out.append(
            Message(
                message_uuid=message_uuid,
                chat_uuid=chat_uuid,
                parent_uuid=parent,
                agui_id=f"m{index}",
                role=Role.ASSISTANT if index % 2 else Role.USER,
                content=f"text {index}",
                seq=index + 1,
                metadata={"agui": {"k": [index]}},
                tool_calls=calls,
            )
        )
        parent = message_uuid
    return out


@contextmanager
def collector_off() -> Iterator[None]:
    """Only reference counting frees objects inside the block."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_untrack_takes_data_out_of_the_collectors_view_and_leaves_the_rest() -> None:
    class Other:
        pass

    other = Other()
    message = history(2)[1]
    data = {"messages": [message], "pair": (message.message_uuid, []), "set": {1, 2}}
    data["other"] = other

    untrack(data)

    assert reachable_tracked(data) == 0
    assert gc.is_tracked(other)  # not data: left as it is
    assert gc.is_tracked(Role.USER)  # an enum member a message holds: left as it is
    assert data["messages"][0] is message and message.tool_calls[0].content == "found"


def test_an_untracked_history_is_freed_by_reference_counting_once_dropped() -> None:
    with collector_off():
        messages = history(OFF_LOOP_ITEMS)
        kept = KeptHistory(1, messages)
        watched = [weakref.ref(messages[0]), weakref.ref(messages[-1].tool_calls[0])]
        cache = HistoryCache(max_messages=OFF_LOOP_ITEMS)
        chat = uuid4()
        cache.keep(chat, kept)
        del messages, kept
        assert all(ref() is not None for ref in watched)

        cache.keep(uuid4(), KeptHistory(2, history(OFF_LOOP_ITEMS)))  # evicts the first

        assert cache.entry(chat) is None
        assert all(ref() is None for ref in watched)


async def test_what_a_kept_history_derives_is_untracked_and_freed_with_it() -> None:
    counts = {}
    for length in (OFF_LOOP_ITEMS, 3 * OFF_LOOP_ITEMS):
        kept = KeptHistory(1, history(length))
        view = kept.view()
        await _facts(view)
        given = await kept_translation(view)
        assert len(given) == length + length // 2  # each answer's tool result too
        counts[length] = reachable_tracked(kept)
        with collector_off():
            watched = weakref.ref(given[-1])  # an AG-UI message the translation keeps
            del kept, view, given
            assert watched() is None

    # The history's own dict of derived data and the containers that hold the index
    # and the translation: as many for a long history as for a short one.
    assert counts[OFF_LOOP_ITEMS] == counts[3 * OFF_LOOP_ITEMS] < 20


async def test_building_an_index_and_a_translation_leaves_the_collector_nothing_to_scan() -> None:
    grown = {}
    for length in (OFF_LOOP_ITEMS, 4 * OFF_LOOP_ITEMS):
        view = KeptHistory(1, history(length)).view()
        gc.collect()
        before = len(gc.get_objects())
        await _facts(view)
        await kept_translation(view)
        gc.collect()
        grown[length] = len(gc.get_objects()) - before

    assert grown[4 * OFF_LOOP_ITEMS] - grown[OFF_LOOP_ITEMS] < 50


async def append_batched(store: Store, chat_uuid: UUID, messages: int) -> None:
    writes: list[Any] = []
    for index in range(messages):
        if index % 2 == 0:
            writes.append(CreateMessage(MessageCreate(chat_uuid=chat_uuid, content=f"q{index}")))
            continue
        answer = MessageCreate(
            chat_uuid=chat_uuid, role=Role.ASSISTANT, content=f"a{index}", agui_id=f"a{index}"
        )
        call = MessageToolCallCreate(
            message_uuid=answer.message_uuid, tool_call_id=f"call{index}", name="f"
        )
        done = MessageToolCallUpdate(content="done", status=MessageStatus.COMPLETE)
        writes += [CreateMessage(answer), CreateToolCall(call), UpdateToolCall(call.uuid, done)]
    await store.apply_writes(writes)


@pytest.mark.parametrize("backend", SQL_BACKENDS)
async def test_a_store_keeps_a_read_history_and_what_runs_derive_from_it_untracked(
    backend: str, tmp_path: Path
) -> None:
    counts = {}
    for length in (OFF_LOOP_ITEMS, 3 * OFF_LOOP_ITEMS):
        async with sql_store(backend, tmp_path / str(length)) as store:
            chat = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="long"))
            await append_batched(store, chat.chat_uuid, length)
            for run in ("first", "second"):  # the cold read, then one extended
                agent = storage_agent(store, run)
                await collect(agent.run(run_input("long", run, [user(f"{run}-q")])))
                await agent.persisted()
            assert store.history_cache is not None
            kept = store.history_cache.entry(chat.chat_uuid)
            assert kept is not None and len(kept.messages) == length + 4
            counts[length] = reachable_tracked(kept)

    # Not one per message: the few objects that hold the history, its index and its
    # translation, and what the latest run added (the same for both lengths).
    assert counts[OFF_LOOP_ITEMS] == counts[3 * OFF_LOOP_ITEMS] < 20


async def test_a_dropped_stream_in_a_cycle_is_still_finalized_after_a_history_is_kept() -> None:
    finalized: list[str] = []

    async def stream() -> AsyncIterator[int]:
        try:
            yield 1
            yield 2
        finally:
            finalized.append("stream")

    live = stream()
    await anext(live)
    holder: dict[str, Any] = {"stream": live}
    holder["self"] = holder  # only the cyclic collector can free it
    view = KeptHistory(1, history(2 * OFF_LOOP_ITEMS)).view()
    await _facts(view)
    await kept_translation(view)
    del live, holder

    gc.collect()
    for _ in range(3):  # the loop's finalizer hook closes it in a task of its own
        await asyncio.sleep(0)

    assert finalized == ["stream"]
    assert reachable_tracked(view.kept) < 20
