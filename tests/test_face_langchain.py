"""The LangChain face: a real ``BaseChatMessageHistory`` over every backend.

Messages read back equal to what was added (ids, tool calls, additional kwargs), the
sync methods work with and without a running event loop when the store runs on a
``BackgroundStore``, ``RunnableWithMessageHistory`` with langchain-core's fake chat
model keeps a conversation across calls, and the history is the same chat the other
faces read.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core._api.deprecation import LangChainDeprecationWarning
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from face_support import json_values, on_the_store_fixture, scramble, text
from threadstore import ChatCreate, MessageCreate, MessageStatus, MessageToolCallCreate, Role, Store
from threadstore.agui import translate_messages
from threadstore.errors import ConfigurationError
from threadstore.faces.langchain import (
    BackgroundStore,
    ThreadstoreChatMessageHistory,
    history_messages,
)

_ids = st.none() | text.filter(bool)
_kwargs = st.dictionaries(text, json_values, max_size=3)
_content = text | st.lists(
    st.fixed_dictionaries({"type": st.just("text"), "text": text}) | text, max_size=2
)
_tool_call = st.fixed_dictionaries(
    {"id": text.filter(bool), "name": text.filter(bool), "args": _kwargs}
)
_message: st.SearchStrategy[BaseMessage] = st.one_of(
    st.builds(HumanMessage, content=_content, id=_ids, additional_kwargs=_kwargs, name=_ids),
    st.builds(SystemMessage, content=_content, id=_ids, additional_kwargs=_kwargs),
    st.builds(
        AIMessage,
        content=_content,
        id=_ids,
        additional_kwargs=_kwargs,
        response_metadata=_kwargs,
        tool_calls=st.lists(_tool_call, max_size=2),
    ),
    st.builds(
        ToolMessage,
        content=_content,
        id=_ids,
        tool_call_id=text.filter(bool),
        additional_kwargs=_kwargs,
        status=st.sampled_from(["success", "error"]),
        artifact=json_values,
    ),
)


def history(store: Store | BackgroundStore, session_id: str = "s1", **kwargs: Any) -> Any:
    """A history of a fresh user unless ``user_uuid`` is given."""
    kwargs.setdefault("user_uuid", uuid.uuid4())
    return ThreadstoreChatMessageHistory(store, session_id=session_id, **kwargs)


@on_the_store_fixture
@given(batches=st.lists(st.lists(_message, min_size=1, max_size=4), min_size=1, max_size=3))
async def test_every_message_kind_reads_back_equal_on_every_backend(
    store: Store, batches: list[list[BaseMessage]]
) -> None:
    chat_history = history(store, session_id=f"s-{uuid.uuid4()}")

    for batch in batches:
        await chat_history.aadd_messages(batch)

    added = [m for batch in batches for m in batch]
    assert await chat_history.aget_messages() == added
    # Loaded twice (the second from the store's cache), changed, and loaded again.
    scramble(
        [await chat_history.aget_messages(), await chat_history.aget_messages()], (BaseMessage,)
    )
    assert await chat_history.aget_messages() == added
    chat = await store.get_chat_by_thread_id(chat_history.user_uuid, chat_history.session_id)
    assert chat is not None
    assert history_messages(await store.get_chat_messages(chat.chat_uuid)) == added


async def test_sessions_are_scoped_by_user_and_session_id(store: Store) -> None:
    alice, bob = uuid.uuid4(), uuid.uuid4()
    await history(store, "s1", user_uuid=alice).aadd_messages([HumanMessage("alice s1")])
    await history(store, "s2", user_uuid=alice).aadd_messages([HumanMessage("alice s2")])
    await history(store, "s1", user_uuid=bob).aadd_messages([HumanMessage("bob s1")])

    assert [m.content for m in await history(store, "s1", user_uuid=alice).aget_messages()] == [
        "alice s1"
    ]
    assert [m.content for m in await history(store, "s1", user_uuid=bob).aget_messages()] == [
        "bob s1"
    ]


async def test_clear_empties_the_session_and_it_can_be_written_again(store: Store) -> None:
    chat_history = history(store)
    await chat_history.aadd_messages([HumanMessage("one"), AIMessage("two")])

    await chat_history.aclear()
    assert await chat_history.aget_messages() == []
    await chat_history.aclear()  # clearing an empty session is fine
    await chat_history.aadd_messages([HumanMessage("three")])

    assert [m.content for m in await chat_history.aget_messages()] == ["three"]


async def test_messages_are_the_chat_other_faces_read(store: Store) -> None:
    user = uuid.uuid4()
    chat_history = history(store, "weather", user_uuid=user)
    call = {"id": "call-1", "name": "forecast", "args": {"city": "Oslo"}}

    await chat_history.aadd_messages(
        [
            SystemMessage("be brief", id="m0"),
            HumanMessage("weather in Oslo?", id="m1"),
            AIMessage("", id="m2", tool_calls=[call]),
            ToolMessage("rain", tool_call_id="call-1", id="m3"),
            AIMessage("It rains.", id="m4"),
        ]
    )

    chat = await store.get_chat_by_thread_id(user, "weather")
    assert chat is not None
    stored = await store.get_chat_messages(chat.chat_uuid)
    assert [(m.role, m.content, m.agui_id) for m in stored] == [
        (Role.SYSTEM, "be brief", "m0"),
        (Role.USER, "weather in Oslo?", "m1"),
        (Role.ASSISTANT, "", "m2"),
        (Role.TOOL, "rain", "m3"),
        (Role.ASSISTANT, "It rains.", "m4"),
    ]
    assert [(c.tool_call_id, c.name, c.arguments) for c in stored[2].tool_calls] == [
        ("call-1", "forecast", '{"city": "Oslo"}')
    ]
    replay = [m.model_dump(exclude_none=True) for m in translate_messages(stored)]
    assert [(m["role"], m["id"]) for m in replay] == [
        ("system", "m0"),
        ("user", "m1"),
        ("assistant", "m2"),
        ("tool", "m3"),
        ("assistant", "m4"),
    ]
    assert replay[2]["tool_calls"][0]["function"] == {
        "name": "forecast",
        "arguments": '{"city": "Oslo"}',
    }
    assert replay[3]["tool_call_id"] == "call-1"


async def test_a_chat_written_by_another_face_reads_as_langchain_messages(store: Store) -> None:
    user = uuid.uuid4()
    chat = await store.create_chat(ChatCreate(user_uuid=user, thread_id="t"))
    done: dict[str, Any] = {"status": MessageStatus.COMPLETE, "in_progress": False}
    await store.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role=Role.USER, content="hi", agui_id="u1", **done)
    )
    answer = await store.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role=Role.ASSISTANT, agui_id="a1", **done)
    )
    await store.create_message_tool_call(
        MessageToolCallCreate(
            message_uuid=answer.message_uuid,
            tool_call_id="c1",
            name="lookup",
            arguments='{"q": "x"}',
            content="found",
            result_message_id="r1",
            **done,
        )
    )

    messages = await history(store, "t", user_uuid=user).aget_messages()

    assert messages == [
        HumanMessage("hi", id="u1"),
        AIMessage("", id="a1", tool_calls=[{"id": "c1", "name": "lookup", "args": {"q": "x"}}]),
        ToolMessage("found", tool_call_id="c1", id="r1"),
    ]


async def test_sync_methods_on_a_plain_store_say_what_to_use_instead(store: Store) -> None:
    chat_history = history(store)

    with pytest.raises(ConfigurationError, match="BackgroundStore"):
        chat_history.add_messages([HumanMessage("hi")])
    with pytest.raises(ConfigurationError, match="aget_messages"):
        _ = chat_history.messages


def test_sync_methods_work_without_an_event_loop(store_url: str) -> None:
    with BackgroundStore(store_url) as background:
        chat_history = history(background)

        chat_history.add_messages([HumanMessage("one")])
        chat_history.add_message(AIMessage("two"))
        assert [m.content for m in chat_history.messages] == ["one", "two"]
        chat_history.clear()
        assert chat_history.messages == []


async def test_sync_and_async_methods_work_inside_a_running_event_loop(store_url: str) -> None:
    with BackgroundStore(store_url) as background:
        chat_history = history(background)

        # A sync call blocks this loop while the store answers on its own thread.
        chat_history.add_messages([HumanMessage("sync")])
        await chat_history.aadd_messages([AIMessage("async")])

        assert [m.content for m in chat_history.messages] == ["sync", "async"]
        assert [m.content for m in await chat_history.aget_messages()] == ["sync", "async"]


def with_history(
    get_history: Any, replies: list[str]
) -> tuple[RunnableWithMessageHistory, list[list[BaseMessage]]]:
    """A fake chat model wrapped with message history; also returns what the model saw."""
    seen: list[list[BaseMessage]] = []

    def record(messages: list[BaseMessage]) -> list[BaseMessage]:
        seen.append(list(messages))
        return messages

    model = GenericFakeChatModel(messages=iter(AIMessage(r) for r in replies))
    with pytest.warns(LangChainDeprecationWarning, match="RunnableWithMessageHistory"):
        chain = RunnableWithMessageHistory(RunnableLambda(record) | model, get_history)
    return chain, seen


def test_runnable_with_message_history_continues_a_conversation_sync(store_url: str) -> None:
    user = uuid.uuid4()
    with BackgroundStore(store_url) as background:
        chain, seen = with_history(
            lambda session_id: history(background, session_id, user_uuid=user), ["hello", "bye"]
        )
        config: Any = {"configurable": {"session_id": "chat-1"}}

        chain.invoke([HumanMessage("hi")], config=config)
        chain.invoke([HumanMessage("see you")], config=config)

        assert [m.content for m in seen[1]] == ["hi", "hello", "see you"]
        stored = history(background, "chat-1", user_uuid=user).messages
        assert [(m.type, m.content) for m in stored] == [
            ("human", "hi"),
            ("ai", "hello"),
            ("human", "see you"),
            ("ai", "bye"),
        ]


async def test_runnable_with_message_history_continues_a_conversation_async(store: Store) -> None:
    user = uuid.uuid4()
    chain, seen = with_history(
        lambda session_id: history(store, session_id, user_uuid=user), ["hello", "bye"]
    )
    config: Any = {"configurable": {"session_id": "chat-1"}}

    await chain.ainvoke([HumanMessage("hi")], config=config)
    await chain.ainvoke([HumanMessage("see you")], config=config)
    # Another session of the same user starts empty.
    other, other_seen = with_history(
        lambda session_id: history(store, session_id, user_uuid=user), ["fresh"]
    )
    await other.ainvoke([HumanMessage("new topic")], config={"configurable": {"session_id": "2"}})

    assert [m.content for m in seen[1]] == ["hi", "hello", "see you"]
    assert [m.content for m in other_seen[0]] == ["new topic"]
    stored = await history(store, "chat-1", user_uuid=user).aget_messages()
    assert [m.content for m in stored] == ["hi", "hello", "see you", "bye"]


async def test_a_history_cleared_by_another_instance_is_written_again(store: Store) -> None:
    user = uuid.uuid4()
    writer, other = history(store, "s", user_uuid=user), history(store, "s", user_uuid=user)
    await writer.aadd_messages([HumanMessage("before")])

    await other.aclear()
    await writer.aadd_messages([HumanMessage("after")])

    assert [m.content for m in await other.aget_messages()] == ["after"]


def test_a_background_store_with_a_bad_url_says_so_and_stops_its_thread() -> None:
    threads = threading.active_count()

    with pytest.raises(ConfigurationError, match="unsupported store URL"):
        BackgroundStore("nosuchdb://x")

    assert threading.active_count() == threads


def test_a_sync_call_on_the_store_s_own_loop_is_refused_instead_of_hanging() -> None:
    with BackgroundStore("memory://") as background:
        chat_history = history(background)

        async def sync_call_inside() -> object:
            return chat_history.messages

        with pytest.raises(ConfigurationError, match="own loop"):
            background.run(sync_call_inside())
