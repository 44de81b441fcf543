"""What a ``MESSAGES_SNAPSHOT`` streamed by an agent leaves in the store.

The fold's rules (docs/architecture.md, "The fold"): a message already known, stored in
the chat or produced by this run, is never rewritten; an unknown one is stored complete,
with its tool calls and reasoning; a tool message answers its call if that call has no
result yet, and is skipped otherwise. The agent runs through a ``StorageAgent`` on a
SQLite file, and the history is read back as a user of the store reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import pytest
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    FunctionCall,
    ImageInputContent,
    InputContentDataSource,
    InputContentUrlSource,
    MessagesSnapshotEvent,
    ReasoningMessage,
    SystemMessage,
    TextInputContent,
    ToolCall,
    ToolMessage,
    UserMessage,
)

from agui_scripts import (
    ScriptedAgent,
    collect,
    run_finished,
    run_input,
    run_started,
    text_message,
    tool_call,
    user,
)
from threadstore import Message, MessageStatus, Role, Store
from threadstore.agui import StorageAgent
from threadstore.models import MediaPart

USER = UUID("00000000-0000-4000-8000-000000000001")
COMPLETE = MessageStatus.COMPLETE


# The conftest's store, on a SQLite file of its own.
pytestmark = pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)


async def run(store: Store, run_id: str, script: Sequence[BaseEvent], messages: Any) -> None:
    agent = StorageAgent(
        "assistant", USER, store, store, ScriptedAgent(script), run_repo=store, owner="test"
    )
    await collect(agent.run(run_input(run_id=run_id, messages=messages)))


async def history(store: Store) -> dict[str, Message]:
    chat = await store.get_chat_by_thread_id(USER, "thread-1")
    assert chat is not None
    return {m.agui_id or "": m for m in await store.get_chat_messages(chat.chat_uuid)}


def call(call_id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(
        id=call_id, type="function", function=FunctionCall(name=name, arguments=arguments)
    )


async def test_a_snapshot_stores_what_is_new_and_never_rewrites_what_is_known(
    store: Store,
) -> None:
    # The first run leaves a call waiting for its result (a client-executed tool).
    first = [
        run_started(run_id="r1"),
        *text_message("a1", "Let me look."),
        *tool_call("c-waiting", "lookup", '{"q": 1}', parent_message_id="a1"),
        run_finished(run_id="r1"),
    ]
    await run(store, "r1", first, [user("u1", "hi")])

    snapshot = MessagesSnapshotEvent(
        messages=[
            # Known from the store: left as stored.
            UserMessage(id="u1", content="a rewritten question"),
            AssistantMessage(id="a1", content="a rewritten answer"),
            # Known from this run's own stream: left as streamed.
            AssistantMessage(id="a-streamed", content="rewritten by the snapshot"),
            # Answers the stored call still waiting.
            ToolMessage(id="t-waiting", tool_call_id="c-waiting", content="42"),
            ReasoningMessage(id="thought", content="Search next.", encrypted_value="sealed"),
            AssistantMessage(
                id="a2",
                content="Searching.",
                name="planner",
                tool_calls=[
                    call("c2", "search", '{"x": 2}'),
                    # A call already stored is not stored twice, nor moved.
                    call("c-waiting", "lookup", "{}"),
                ],
            ),
            ToolMessage(id="t2", tool_call_id="c2", content="found it"),
            # A call that is answered, and one nobody made: both skipped.
            ToolMessage(id="t2-again", tool_call_id="c2", content="a second answer"),
            ToolMessage(id="t-orphan", tool_call_id="no-such-call", content="lost"),
            SystemMessage(id="sys", content="Be brief.", name="policy"),
        ]
    )
    second = [
        run_started(run_id="r2"),
        *text_message("a-streamed", "Streamed."),
        snapshot,
        run_finished(run_id="r2"),
    ]
    await run(store, "r2", second, [user("u1", "hi"), user("u2", "go on")])

    stored = await history(store)
    assert list(stored) == ["u1", "a1", "u2", "a-streamed", "thought", "a2", "sys"]
    assert stored["u1"].content == "hi"
    assert stored["a1"].content == "Let me look."
    assert stored["a-streamed"].content == "Streamed."
    # The waiting call got its result, on the message that made it.
    (waiting,) = stored["a1"].tool_calls
    assert (waiting.tool_call_id, waiting.content, waiting.status) == ("c-waiting", "42", COMPLETE)
    # The reasoning message is a reasoning step of its own message, sealed value kept.
    thought = stored["thought"]
    assert thought.role == Role.REASONING
    assert [(r.agui_id, r.content, r.encrypted_value, r.status) for r in thought.reasonings] == [
        ("thought", "Search next.", "sealed", COMPLETE)
    ]
    # The new assistant message is complete, with its one new call and that call's result.
    a2 = stored["a2"]
    assert (a2.role, a2.content, a2.name, a2.status) == (
        Role.ASSISTANT,
        "Searching.",
        "planner",
        COMPLETE,
    )
    assert [(t.tool_call_id, t.name, t.arguments, t.content, t.status) for t in a2.tool_calls] == [
        ("c2", "search", '{"x": 2}', "found it", COMPLETE)
    ]
    assert (stored["sys"].role, stored["sys"].content, stored["sys"].name) == (
        Role.SYSTEM,
        "Be brief.",
        "policy",
    )
    # Every message of the history is complete: nothing is left streaming.
    assert {m.status for m in stored.values()} == {COMPLETE}


async def test_a_snapshot_user_message_with_parts_keeps_them(store: Store) -> None:
    snapshot = MessagesSnapshotEvent(
        messages=[
            UserMessage(
                id="u-parts",
                content=[
                    TextInputContent(type="text", text="What is this?"),
                    ImageInputContent(
                        type="image",
                        source=InputContentUrlSource(
                            type="url", value="https://example.test/cat.png", mime_type="image/png"
                        ),
                    ),
                ],
            )
        ]
    )
    await run(store, "r1", [run_started(run_id="r1"), snapshot, run_finished(run_id="r1")], [])

    stored = (await history(store))["u-parts"]
    assert (stored.role, stored.content, stored.status) == (Role.USER, "What is this?", COMPLETE)
    assert stored.content_parts is not None
    _, image = stored.content_parts
    assert isinstance(image, MediaPart)
    assert (image.type, image.source, image.value) == (
        "image",
        "url",
        "https://example.test/cat.png",
    )


async def test_a_snapshot_user_message_with_bad_content_is_stored_as_its_text(
    store: Store,
) -> None:
    # Inline data that is not base64 cannot be stored as a part; the message's text is
    # still what the user wrote, and it is kept (the run does not fail for it).
    snapshot = MessagesSnapshotEvent(
        messages=[
            UserMessage(
                id="u-bad",
                content=[
                    TextInputContent(type="text", text="See the picture."),
                    ImageInputContent(
                        type="image",
                        source=InputContentDataSource(
                            type="data", value="!!! not base64 !!!", mime_type="image/png"
                        ),
                    ),
                    TextInputContent(type="text", text="Is it a cat?"),
                ],
            ),
            AssistantMessage(id="a-after", content="It is a cat."),
        ]
    )
    await run(store, "r1", [run_started(run_id="r1"), snapshot, run_finished(run_id="r1")], [])

    stored = await history(store)
    assert list(stored) == ["u-bad", "a-after"]
    bad = stored["u-bad"]
    assert (bad.role, bad.content, bad.content_parts, bad.status) == (
        Role.USER,
        "See the picture.\nIs it a cat?",
        None,
        COMPLETE,
    )
    assert stored["a-after"].content == "It is a cat."
