"""A tool call and its result, saved through one face, read back through every face.

LangChain and the OpenAI Agents SDK keep a tool result as a message of its own (a
``ToolMessage``, a ``function_call_output`` item): it is stored as a ``tool`` message
naming its call in ``metadata["tool_call_id"]``. Each face reads another face's such
message as its own kind of tool result, answering the same call, with the same text
and id; system and developer messages read as the face's system message. The store is
a SQLite file, as an application shares it between its frameworks.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from ag_ui.core import ToolMessage as AguiToolMessage
from agent_framework import Content
from agent_framework import Message as AFMessage
from agents.items import TResponseInputItem
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from threadstore import ChatCreate, MessageCreate, MessageStatus, Role, Store
from threadstore.agui import translate_messages
from threadstore.faces.agent_framework import ThreadstoreHistoryProvider
from threadstore.faces.langchain import ThreadstoreChatMessageHistory
from threadstore.faces.openai_agents import ThreadstoreSession

THREAD = "weather"


# The conftest's store, on a SQLite file of its own.
pytestmark = pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)


@pytest.fixture
def user() -> uuid.UUID:
    return uuid.uuid4()


def langchain(store: Store, user: uuid.UUID) -> ThreadstoreChatMessageHistory:
    return ThreadstoreChatMessageHistory(store, session_id=THREAD, user_uuid=user)


def agents_session(store: Store, user: uuid.UUID) -> ThreadstoreSession:
    return ThreadstoreSession(THREAD, store, user_uuid=user)


async def framework_messages(store: Store, user: uuid.UUID) -> list[AFMessage]:
    return await ThreadstoreHistoryProvider(store, user).get_messages(THREAD)


def framework_shape(messages: list[AFMessage]) -> list[tuple[Any, ...]]:
    """Each framework message as role, id, text, and its calls and results."""
    return [
        (
            m.role,
            m.message_id,
            m.text,
            [
                (c.type, c.call_id, c.name, c.arguments, c.result)
                for c in m.contents
                if c.type in ("function_call", "function_result")
            ],
        )
        for m in messages
    ]


LANGCHAIN_CONVERSATION = [
    SystemMessage("Be brief.", id="m0"),
    HumanMessage("Weather in Oslo?", id="m1"),
    AIMessage(
        "", id="m2", tool_calls=[{"id": "call-1", "name": "forecast", "args": {"city": "Oslo"}}]
    ),
    ToolMessage("rain", tool_call_id="call-1", id="m3"),
    AIMessage("It rains.", id="m4"),
]

AGENTS_CONVERSATION: list[TResponseInputItem] = [
    {"role": "system", "content": "Be brief."},
    {"role": "developer", "content": "Answer in metric units."},
    {"role": "user", "content": "Weather in Oslo?"},
    {
        "type": "function_call",
        "id": "fc-1",
        "call_id": "call-1",
        "name": "forecast",
        "arguments": '{"city": "Oslo"}',
    },
    {"type": "function_call_output", "call_id": "call-1", "output": "rain, 12 degrees"},
    {
        "type": "message",
        "id": "msg-1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "It rains.", "annotations": []}],
    },
]


async def test_a_langchain_tool_result_reads_back_through_every_face(
    store: Store, user: uuid.UUID
) -> None:
    await langchain(store, user).aadd_messages(LANGCHAIN_CONVERSATION)

    # The face that wrote it reads it back equal.
    assert await langchain(store, user).aget_messages() == LANGCHAIN_CONVERSATION
    # The Agents SDK reads the result as the output of the same call.
    assert await agents_session(store, user).get_items() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "type": "function_call",
            "call_id": "call-1",
            "name": "forecast",
            "arguments": '{"city": "Oslo"}',
        },
        {"type": "function_call_output", "call_id": "call-1", "output": "rain"},
        {"role": "assistant", "content": "It rains."},
    ]
    # The Agent Framework reads it as a tool message with the result, keeping its id.
    assert framework_shape(await framework_messages(store, user)) == [
        ("system", "m0", "Be brief.", []),
        ("user", "m1", "Weather in Oslo?", []),
        (
            "assistant",
            "m2",
            "",
            [("function_call", "call-1", "forecast", '{"city": "Oslo"}', None)],
        ),
        ("tool", "m3", "", [("function_result", "call-1", None, None, "rain")]),
        ("assistant", "m4", "It rains.", []),
    ]


async def test_an_agents_sdk_tool_result_reads_back_through_every_face(
    store: Store, user: uuid.UUID
) -> None:
    await agents_session(store, user).add_items(AGENTS_CONVERSATION)

    assert await agents_session(store, user).get_items() == AGENTS_CONVERSATION
    # LangChain reads the output as a ToolMessage answering the call; the system and
    # developer instructions as system messages.
    assert await langchain(store, user).aget_messages() == [
        SystemMessage("Be brief."),
        SystemMessage("Answer in metric units."),
        HumanMessage("Weather in Oslo?"),
        AIMessage(
            "",
            id="fc-1",
            tool_calls=[{"id": "call-1", "name": "forecast", "args": {"city": "Oslo"}}],
        ),
        ToolMessage("rain, 12 degrees", tool_call_id="call-1"),
        AIMessage("It rains.", id="msg-1"),
    ]
    assert framework_shape(await framework_messages(store, user)) == [
        ("system", None, "Be brief.", []),
        ("system", None, "Answer in metric units.", []),
        ("user", None, "Weather in Oslo?", []),
        (
            "assistant",
            "fc-1",
            "",
            [("function_call", "call-1", "forecast", '{"city": "Oslo"}', None)],
        ),
        ("tool", None, "", [("function_result", "call-1", None, None, "rain, 12 degrees")]),
        ("assistant", "msg-1", "It rains.", []),
    ]


async def test_a_framework_tool_result_reads_back_through_every_face(
    store: Store, user: uuid.UUID
) -> None:
    conversation = [
        AFMessage("user", ["Weather in Oslo?"], message_id="u1"),
        AFMessage(
            "assistant",
            [Content.from_function_call("call-1", "forecast", arguments='{"city": "Oslo"}')],
            message_id="a1",
        ),
        AFMessage("tool", [Content.from_function_result("call-1", result="rain")], message_id="t1"),
        AFMessage("assistant", ["It rains."], message_id="a2"),
    ]
    await ThreadstoreHistoryProvider(store, user).save_messages(THREAD, conversation)

    assert [m.to_dict() for m in await framework_messages(store, user)] == [
        m.to_dict() for m in conversation
    ]
    assert await langchain(store, user).aget_messages() == [
        HumanMessage("Weather in Oslo?", id="u1"),
        AIMessage(
            "", id="a1", tool_calls=[{"id": "call-1", "name": "forecast", "args": {"city": "Oslo"}}]
        ),
        # One framework tool message may answer several calls: its results are kept on
        # their calls, and the message's own id stays the framework's.
        ToolMessage("rain", tool_call_id="call-1"),
        AIMessage("It rains.", id="a2"),
    ]
    assert await agents_session(store, user).get_items() == [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "type": "function_call",
            "call_id": "call-1",
            "name": "forecast",
            "arguments": '{"city": "Oslo"}',
        },
        {"type": "function_call_output", "call_id": "call-1", "output": "rain"},
        {"role": "assistant", "content": "It rains."},
    ]


async def test_a_tool_message_that_names_no_call_is_left_out_by_every_face(
    store: Store, user: uuid.UUID
) -> None:
    # A tool message of another face that lost the id of its call cannot answer anything:
    # no face invents a call id for it, and the rest of the history still reads.
    chat = await store.create_chat(ChatCreate(user_uuid=user, thread_id=THREAD))
    done: dict[str, Any] = {"status": MessageStatus.COMPLETE, "in_progress": False}
    for role, content, agui_id in [
        (Role.USER, "hi", "u1"),
        (Role.TOOL, "an orphan result", "t1"),
        (Role.DEVELOPER, "Use metric units.", "d1"),
    ]:
        await store.create_message(
            MessageCreate(
                chat_uuid=chat.chat_uuid, role=role, content=content, agui_id=agui_id, **done
            )
        )

    assert await langchain(store, user).aget_messages() == [
        HumanMessage("hi", id="u1"),
        SystemMessage("Use metric units.", id="d1"),
    ]
    assert await agents_session(store, user).get_items() == [
        {"role": "user", "content": "hi"},
        {"role": "developer", "content": "Use metric units."},
    ]
    assert framework_shape(await framework_messages(store, user)) == [
        ("user", "u1", "hi", []),
        ("system", "d1", "Use metric units.", []),
    ]


async def test_a_tool_result_every_face_reads_replays_through_agui(
    store: Store, user: uuid.UUID
) -> None:
    await agents_session(store, user).add_items(AGENTS_CONVERSATION)
    chat = await store.get_chat_by_thread_id(user, THREAD)
    assert chat is not None

    replay = translate_messages(await store.get_chat_messages(chat.chat_uuid))

    tool = [m for m in replay if isinstance(m, AguiToolMessage)]
    assert [(m.tool_call_id, m.content) for m in tool] == [("call-1", "rain, 12 degrees")]
