"""The chat engine renders history a StorageAgent stored, on every backend."""

from __future__ import annotations

import itertools
from uuid import UUID

from agui_scripts import ScriptedAgent, collect, run_input, user
from chat_streams import END, RUN, fold, text, thinking, tool
from threadstore import Store
from threadstore.agui import StorageAgent
from threadstore.chat import UIMessage, seal_assistant_turn, ui_from_messages

USER = UUID("00000000-0000-4000-8000-0000000000c1")

# Bucket order (reasoning, text, tools) is also arrival order here: each message id
# holds one element kind, so stored history without a parts order renders the same.
STREAM = [
    *RUN,
    *thinking("r-1", "Need ", "a lookup."),
    *text("m-1", "Let me ", "look."),
    *tool("c-1", "search", '{"q": ', '"x"}', parent="m-1", result="found it"),
    *text("m-2", "It is ", "there."),
    *END,
]


async def stored_ui(store: Store) -> list[UIMessage]:
    agent = StorageAgent("assistant", USER, store, store, ScriptedAgent(STREAM), run_repo=store)
    await collect(agent.run(run_input(run_id="r-1", messages=[user("u-1", "Where is it?")])))
    chat = await store.get_chat_by_thread_id(USER, "thread-1")
    assert chat is not None
    counter = itertools.count()
    return ui_from_messages(
        await store.get_chat_messages(chat.chat_uuid), lambda: f"gen-{next(counter)}"
    )


async def test_stored_history_renders_as_the_sealed_live_turn(store: Store) -> None:
    live = seal_assistant_turn(fold(STREAM)).message

    question, answer = await stored_ui(store)

    assert (question.id, question.content) == ("u-1", "Where is it?")
    assert answer == live
    assert [part.type for part in answer.parts or ()] == ["reasoning", "text", "tool", "text"]
    assert answer.content == "Let me look.It is there."
