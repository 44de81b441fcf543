"""The OpenAI Agents SDK face: ``ThreadstoreSession`` behaves as the SDK's ``SQLiteSession``.

The same operations give the same answers as ``SQLiteSession`` on every backend, every
item type reads back exactly, the SDK's ``Runner`` with its scripted model keeps a
conversation in the session, the items are messages the other faces read, and a
session written by one process is continued by another.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import typing
import uuid
from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool
from agents.items import TResponseInputItem
from agents.memory import Session, SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call
from hypothesis import given
from hypothesis import strategies as st

import threadstore
from face_support import json_values, on_the_store_fixture, scramble, text
from test_crash_recovery import WAIT_LIMIT
from test_crash_recovery import shared_store_url as shared_store_url  # a fixture, used by name
from threadstore import ChatCreate, MessageCreate, MessageStatus, MessageToolCallCreate, Role, Store
from threadstore.agui import translate_messages
from threadstore.faces.openai_agents import ThreadstoreSession, history_items

CHILD = Path(__file__).with_name("agents_session_child.py")
NO_TRACING = RunConfig(tracing_disabled=True)

ITEM_TYPES = sorted(
    {
        kind
        for member in typing.get_args(TResponseInputItem)
        for kind in typing.get_args(typing.get_type_hints(member)["type"])
        if isinstance(kind, str)
    }
)
"""Every ``type`` an input item can have, read from the SDK's own union."""


def _with_extras(base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``base``'s fields plus a few arbitrary JSON fields the SDK may add one day."""
    fields = {
        key: st.just(value) if not isinstance(value, st.SearchStrategy) else value
        for key, value in base.items()
    }
    return st.builds(
        lambda item, extra: {**extra, **item},
        st.fixed_dictionaries(fields),
        st.dictionaries(st.sampled_from(["id", "status", "x_extra"]), json_values, max_size=2),
    )


_content = text | st.lists(
    st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text"]), "text": text}),
    max_size=2,
)
_item: st.SearchStrategy[dict[str, Any]] = st.one_of(
    _with_extras(
        {"role": st.sampled_from(["user", "assistant", "system", "developer"]), "content": _content}
    ),
    _with_extras(
        {"type": "message", "role": st.sampled_from(["user", "assistant"]), "content": _content}
    ),
    _with_extras(
        {
            "type": "function_call",
            "call_id": text.filter(bool),
            "name": text.filter(bool),
            "arguments": text,
        }
    ),
    _with_extras(
        {"type": "function_call_output", "call_id": text.filter(bool), "output": _content}
    ),
    _with_extras(
        {
            "type": "reasoning",
            "summary": st.lists(
                st.fixed_dictionaries({"type": st.just("summary_text"), "text": text}), max_size=2
            ),
            "encrypted_content": st.none() | text,
        }
    ),
    _with_extras({"type": st.sampled_from(ITEM_TYPES), "payload": json_values}),
)


def text_item(text: str) -> TResponseInputItem:
    return {"role": "user", "content": text}


def session_of(store: Store, session_id: str | None = None, **kwargs: Any) -> ThreadstoreSession:
    """A session of a fresh user (and a fresh id unless given)."""
    kwargs.setdefault("user_uuid", uuid.uuid4())
    return ThreadstoreSession(session_id or f"s-{uuid.uuid4()}", store, **kwargs)


_operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 4)),
        st.tuples(st.just("get"), st.sampled_from([None, 0, 1, 2, 3, 7, -1])),
        st.tuples(st.just("pop"), st.none()),
        st.tuples(st.just("clear"), st.none()),
    ),
    max_size=14,
)


async def apply(session: Session, operation: tuple[str, Any], counter: list[int]) -> Any:
    """Run one operation on ``session``; return what a caller would see."""
    kind, argument = operation
    if kind == "add":
        items = []
        for _ in range(argument):
            counter[0] += 1
            items.append(text_item(f"item {counter[0]}"))
        return await session.add_items(items)
    if kind == "get":
        return await session.get_items(argument)
    if kind == "pop":
        return await session.pop_item()
    return await session.clear_session()


@on_the_store_fixture
@given(operations=_operations)
async def test_the_same_operations_give_what_sqlite_session_gives(
    store: Store, operations: list[tuple[str, Any]]
) -> None:
    ours = session_of(store)
    theirs = SQLiteSession(ours.session_id)
    try:
        ours_counter, theirs_counter = [0], [0]
        for operation in [*operations, ("get", None)]:
            expected = await apply(theirs, operation, theirs_counter)
            assert await apply(ours, operation, ours_counter) == expected, operation
    finally:
        theirs.close()


async def test_session_settings_limit_applies_when_no_limit_is_given(store: Store) -> None:
    ours = session_of(store, session_settings=SessionSettings(limit=2))
    theirs = SQLiteSession(ours.session_id, session_settings=SessionSettings(limit=2))
    try:
        for session in (ours, theirs):
            await session.add_items([text_item("a"), text_item("b"), text_item("c")])

        assert (
            await ours.get_items()
            == await theirs.get_items()
            == [
                text_item("b"),
                text_item("c"),
            ]
        )
        assert await ours.get_items(3) == await theirs.get_items(3)
    finally:
        theirs.close()


async def test_latest_items_are_found_past_one_page_of_messages(store: Store) -> None:
    session = session_of(store)
    items = [text_item(f"m{i}") for i in range(1203)]
    await session.add_items(items)

    assert await session.get_items(1201) == items[2:]
    assert await session.get_items() == items


@on_the_store_fixture
@given(batches=st.lists(st.lists(_item, min_size=1, max_size=4), min_size=1, max_size=3))
async def test_every_item_type_reads_back_exactly_on_every_backend(
    store: Store, batches: list[list[Any]]
) -> None:
    session = session_of(store)
    for batch in batches:
        await session.add_items(batch)
    added = [item for batch in batches for item in batch]

    assert await session.get_items() == added
    # Loaded twice (the second from the store's cache), changed, and loaded again.
    scramble([await session.get_items(), await session.get_items()])
    assert await session.get_items() == added
    chat = await store.get_chat_by_thread_id(session.user_uuid, session.session_id)
    assert chat is not None
    assert history_items(await store.get_chat_messages(chat.chat_uuid)) == added
    assert await session.get_items(2) == added[-2:]
    assert await session.pop_item() == added[-1]
    assert await session.get_items() == added[:-1]


async def test_sessions_are_scoped_by_user_and_session_id(store: Store) -> None:
    alice, bob = uuid.uuid4(), uuid.uuid4()
    assert isinstance(session_of(store), Session)  # the SDK's runtime-checkable protocol
    await session_of(store, "s1", user_uuid=alice).add_items([text_item("alice s1")])
    await session_of(store, "s2", user_uuid=alice).add_items([text_item("alice s2")])
    await session_of(store, "s1", user_uuid=bob).add_items([text_item("bob s1")])

    assert await session_of(store, "s1", user_uuid=alice).get_items() == [text_item("alice s1")]
    assert await session_of(store, "s1", user_uuid=bob).get_items() == [text_item("bob s1")]


async def test_items_are_messages_the_other_faces_read(store: Store) -> None:
    user = uuid.uuid4()
    session = session_of(store, "weather", user_uuid=user)
    await session.add_items(
        [
            {"role": "user", "content": "weather in Oslo?"},
            {
                "type": "function_call",
                "id": "fc-1",
                "call_id": "call-1",
                "name": "forecast",
                "arguments": '{"city":"Oslo"}',
            },
            {"type": "function_call_output", "call_id": "call-1", "output": "rain"},
            {
                "type": "message",
                "id": "msg-1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "It rains.", "annotations": []}],
            },
        ]
    )

    chat = await store.get_chat_by_thread_id(user, "weather")
    assert chat is not None
    stored = await store.get_chat_messages(chat.chat_uuid)
    assert [(m.role, m.content) for m in stored] == [
        (Role.USER, "weather in Oslo?"),
        (Role.ASSISTANT, ""),
        (Role.TOOL, "rain"),
        (Role.ASSISTANT, "It rains."),
    ]
    assert [(c.tool_call_id, c.name, c.arguments) for c in stored[1].tool_calls] == [
        ("call-1", "forecast", '{"city":"Oslo"}')
    ]
    replay = [m.model_dump(exclude_none=True) for m in translate_messages(stored)]
    assert [m["role"] for m in replay] == ["user", "assistant", "tool", "assistant"]
    assert replay[1]["tool_calls"][0]["function"]["name"] == "forecast"
    assert replay[2]["tool_call_id"] == "call-1"
    assert replay[3]["id"] == "msg-1"


async def test_a_chat_written_by_another_face_reads_as_items(store: Store) -> None:
    user = uuid.uuid4()
    chat = await store.create_chat(ChatCreate(user_uuid=user, thread_id="t"))
    done: dict[str, Any] = {"status": MessageStatus.COMPLETE, "in_progress": False}
    await store.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role=Role.USER, content="hi", **done)
    )
    answer = await store.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role=Role.ASSISTANT, **done)
    )
    await store.create_message_tool_call(
        MessageToolCallCreate(
            message_uuid=answer.message_uuid,
            tool_call_id="c1",
            name="lookup",
            arguments='{"q":"x"}',
            content="found",
            **done,
        )
    )
    await store.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role=Role.ASSISTANT, content="Found it.", **done)
    )

    assert await session_of(store, "t", user_uuid=user).get_items() == [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q":"x"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "found"},
        {"role": "assistant", "content": "Found it."},
    ]


@function_tool
def forecast(city: str) -> str:
    """The weather in ``city``."""
    return f"rain in {city}"


def weather_agent() -> tuple[Agent[Any], ScriptedModel]:
    """An agent whose model calls ``forecast`` once, answers, then answers a follow-up."""
    model = ScriptedModel(
        [
            [function_call("forecast", {"city": "Oslo"}, call_id="call-1")],
            [assistant_message("It rains in Oslo.", item_id="msg-1")],
            [assistant_message("Still rain.", item_id="msg-2")],
        ]
    )
    return Agent(name="assistant", model=model, tools=[forecast]), model


async def converse(session: Session) -> tuple[ScriptedModel, list[TResponseInputItem]]:
    """Two turns of the weather agent on ``session``; the model and the session's items."""
    agent, model = weather_agent()
    first = await Runner.run(agent, "Weather in Oslo?", session=session, run_config=NO_TRACING)
    assert first.final_output == "It rains in Oslo."
    second = await Runner.run(agent, "And tomorrow?", session=session, run_config=NO_TRACING)
    assert second.final_output == "Still rain."
    return model, await session.get_items()


async def test_runner_keeps_the_conversation_as_sqlite_session_does(store: Store) -> None:
    ours = session_of(store)
    theirs = SQLiteSession(ours.session_id)
    try:
        model, items = await converse(ours)
        _, their_items = await converse(theirs)
    finally:
        theirs.close()

    assert items == their_items
    assert model.last_call is not None
    seen = model.last_call.input
    assert [item.get("type", "message") for item in seen] == [
        "message",  # Weather in Oslo?
        "function_call",
        "function_call_output",
        "message",  # It rains in Oslo.
        "message",  # And tomorrow?
    ]
    assert seen[2]["output"] == "rain in Oslo"


async def continue_in_child(url: str, user: uuid.UUID, session_id: str, text: str) -> Any:
    """Run one turn in a new process; return the input its model was given."""
    child = await asyncio.create_subprocess_exec(
        *(sys.executable, str(CHILD), url, str(user), session_id, text, "child reply"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(CHILD.parent)},
    )
    out, err = await asyncio.wait_for(child.communicate(), WAIT_LIMIT)
    assert child.returncode == 0, err.decode()
    return json.loads(out.decode().splitlines()[-1])


async def test_a_session_written_by_one_process_is_continued_by_another(
    shared_store_url: str,
) -> None:
    user = uuid.uuid4()
    async with await threadstore.open_store(shared_store_url) as store:
        session = ThreadstoreSession("shared", store, user_uuid=user)
        agent, _ = weather_agent()
        await Runner.run(agent, "Weather in Oslo?", session=session, run_config=NO_TRACING)
        before = await session.get_items()

        seen_by_child = await continue_in_child(shared_store_url, user, "shared", "Thanks!")

        assert seen_by_child == [*before, {"role": "user", "content": "Thanks!"}]
        after = await session.get_items()
        assert after[: len(before)] == before
        assert after[len(before) :][0] == {"role": "user", "content": "Thanks!"}
        assert after[-1]["content"][0]["text"] == "child reply"


async def test_a_session_cleared_by_another_instance_is_written_again(store: Store) -> None:
    user = uuid.uuid4()
    writer, other = session_of(store, "s", user_uuid=user), session_of(store, "s", user_uuid=user)
    await writer.add_items([text_item("before")])

    await other.clear_session()
    await writer.add_items([text_item("after")])

    assert await other.get_items() == [text_item("after")]


async def test_pop_goes_past_messages_that_have_no_item_form(store: Store) -> None:
    user = uuid.uuid4()
    chat = await store.create_chat(ChatCreate(user_uuid=user, thread_id="t"))
    session = session_of(store, "t", user_uuid=user)
    await session.add_items([text_item("first"), text_item("second")])
    await store.create_message(  # written by another face; no session item reads from it
        MessageCreate(chat_uuid=chat.chat_uuid, role=Role.ACTIVITY, activity_type="progress")
    )

    assert await session.pop_item() == text_item("second")
    assert await session.get_items() == [text_item("first")]
