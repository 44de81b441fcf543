"""What a store keeps of a long history costs the cyclic collector nothing, and the library
never changes the host's collector.

A full collection scans every object the collector tracks, so a long history kept as
models would make every full collection of the process as slow as the history is long.
A store keeps a history as compact entries instead (tuples of strings, numbers and times,
which CPython stops tracking by itself) and builds models from them on access. These
tests count objects, never time.
"""

from __future__ import annotations

import asyncio
import gc
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from pydantic import BaseModel

from agui_scripts import collect, run_input, user
from test_long_chats import SQL_BACKENDS, USER, sql_store, storage_agent
from threadstore import (
    ChatCreate,
    MessageCreate,
    MessageReasoningCreate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    Role,
    Store,
)
from threadstore.fold import HISTORY_INDEX
from threadstore.store.ops import CreateMessage, CreateReasoning, CreateToolCall, UpdateToolCall

SOURCE = Path(__file__).resolve().parents[1] / "src" / "threadstore"


def reachable_tracked(*roots: object) -> int:
    """How many objects reachable from ``roots`` through data the collector tracks."""
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
        if not (data or kind.__module__.startswith("threadstore")):
            continue
        tracked += gc.is_tracked(item)
        stack.extend(o for o in gc.get_referents(item) if not isinstance(o, type))
    return tracked


async def append_batched(store: Store, chat_uuid: UUID, messages: int) -> None:
    """Questions, and answers with nested metadata, reasoning and an answered tool call."""
    writes: list[Any] = []
    for index in range(messages):
        if index % 2 == 0:
            writes.append(CreateMessage(MessageCreate(chat_uuid=chat_uuid, content=f"q{index}")))
            continue
        answer = MessageCreate(
            chat_uuid=chat_uuid,
            role=Role.ASSISTANT,
            content=f"a{index}",
            agui_id=f"a{index}",
            metadata={"nested": {"list": [index, {"deep": "x"}]}},
        )
        call = MessageToolCallCreate(
            message_uuid=answer.message_uuid, tool_call_id=f"call{index}", name="f"
        )
        step = MessageReasoningCreate(message_uuid=answer.message_uuid, content="thinking")
        done = MessageToolCallUpdate(content="done", status=MessageStatus.COMPLETE)
        writes += [
            CreateMessage(answer),
            CreateReasoning(step),
            CreateToolCall(call),
            UpdateToolCall(call.uuid, done),
        ]
    await store.apply_writes(writes)


@pytest.mark.parametrize("backend", SQL_BACKENDS)
async def test_a_store_keeps_a_history_as_entries_the_collector_does_not_track(
    backend: str, tmp_path: Path
) -> None:
    counts = {}
    for length in (300, 900):
        async with sql_store(backend, tmp_path / str(length)) as store:
            chat = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="long"))
            await append_batched(store, chat.chat_uuid, length)
            for run in ("first", "second"):  # the cold read, then one extended
                agent = storage_agent(store, run)
                await collect(agent.run(run_input("long", run, [user(f"{run}-q")])))
                await agent.persisted()
            view = await store.messages.read_history(chat.chat_uuid, HISTORY_INDEX)
            assert len(view) > length  # and what the runs stored
            assert store.history_cache is not None
            kept = store.history_cache.entry(chat.chat_uuid)
            assert kept is not None
            # CPython stops tracking a tuple of untracked items when a collection looks
            # at it; one holding tuples it has not looked at yet, at a later one. An
            # entry nests tuples three deep, so three collections settle every entry
            # whatever order the collector meets them in.
            for _ in range(3):
                gc.collect()
            counts[length] = (
                reachable_tracked(kept.entries, kept.positions),
                reachable_tracked(view.derived(HISTORY_INDEX)),
            )
            # Built on access, the models are whole and the reader's own.
            first, again = view[1], view[1]
            assert first == again and first is not again
            assert first.metadata == {"nested": {"list": [1, {"deep": "x"}]}}
            assert [c.content for c in first.tool_calls] == ["done"]
            assert [r.content for r in first.reasonings] == ["thinking"]

    # The list of entries (and the newest few, until a later collection), and the
    # index's few containers: not one per message, however long the history.
    for entries, index in counts.values():
        assert entries < 50 and index < 20, counts


async def test_a_dropped_stream_in_a_cycle_is_still_finalized_while_histories_are_kept(
    tmp_path: Path,
) -> None:
    finalized: list[str] = []

    async def stream() -> AsyncIterator[int]:
        try:
            yield 1
            yield 2
        finally:
            finalized.append("stream")

    async with sql_store("sqlite", tmp_path / "db") as store:
        chat = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="long"))
        await append_batched(store, chat.chat_uuid, 1000)
        live = stream()
        await anext(live)
        holder: dict[str, Any] = {"stream": live}
        holder["self"] = holder  # only the cyclic collector can free it
        await store.messages.read_history(chat.chat_uuid, HISTORY_INDEX)
        del live, holder

        gc.collect()
        for _ in range(3):  # the loop's finalizer hook closes it in a task of its own
            await asyncio.sleep(0)

    assert finalized == ["stream"]


def test_the_library_leaves_the_hosts_collector_alone() -> None:
    # No collector switches and no calls into the interpreter's C API: a library must
    # work on interpreters without it and must not change its host's collector. The
    # command line (an application) may freeze its own start-up heap.
    tricks = re.compile(r"\bctypes\b|gc\.(disable|freeze|enable)\(|PyObject_GC_UnTrack")
    found = [
        f"{path.relative_to(SOURCE)}:{number}"
        for path in SOURCE.rglob("*.py")
        if "cli" not in path.relative_to(SOURCE).parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if tricks.search(line)
    ]
    assert found == []
