"""The history window: the agent gets the last turns, never a call without its result."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from uuid import UUID, uuid4

import httpx
import pytest
from ag_ui.core import AssistantMessage, BaseEvent, RunAgentInput, ToolMessage
from hypothesis import given, settings
from hypothesis import strategies as st

from agui_scripts import ScriptedAgent, collect, full_turn, run_input, user
from server_support import LiveServer, collect_sse
from server_support import run_input as server_run_input
from sqlite_support import sqlite_store
from threadstore import ChatCreate, InvalidInputError, Message, Reasoning, Role, ToolCall
from threadstore.agui import HistoryWindow, StorageAgent, translate_messages
from threadstore.agui._window import message_chars
from threadstore.server import create_app

CHAT = UUID("00000000-0000-4000-8000-0000000000c1")
USER = UUID("00000000-0000-4000-8000-0000000000c2")


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Stored histories: optional leading messages, then turns of answers, calls and results."""
    messages: list[Message] = []
    counter = iter(range(1_000_000))

    def message(role: Role, text: str) -> Message:
        n = next(counter)
        return Message(
            message_uuid=uuid4(), chat_uuid=CHAT, role=role, content=text, agui_id=f"m{n}", seq=n
        )

    text = st.text(alphabet="abc ", max_size=40)
    if draw(st.booleans()):
        messages.append(message(Role.ASSISTANT, draw(text)))  # a greeting before any turn
    for _ in range(draw(st.integers(0, 6))):
        messages.append(message(Role.USER, draw(text)))
        for _ in range(draw(st.integers(0, 3))):
            answer = message(Role.ASSISTANT, draw(text))
            if draw(st.booleans()):
                answer.reasonings.append(
                    Reasoning(uuid=uuid4(), message_uuid=answer.message_uuid, content=draw(text))
                )
            for _ in range(draw(st.integers(0, 2))):
                n = next(counter)
                answer.tool_calls.append(
                    ToolCall(
                        uuid=uuid4(),
                        message_uuid=answer.message_uuid,
                        tool_call_id=f"call{n}",
                        name="lookup",
                        arguments=draw(text),
                        content=draw(st.none() | text),
                    )
                )
            messages.append(answer)
    return messages


windows = st.builds(
    HistoryWindow,
    max_turns=st.none() | st.integers(1, 5),
    max_chars=st.none() | st.integers(1, 300),
)


@settings(max_examples=300, deadline=None)
@given(histories(), windows)
def test_a_window_is_a_suffix_of_whole_turns_that_never_splits_a_call_from_its_result(
    history: list[Message], window: HistoryWindow
) -> None:
    selected = list(window.select(history))

    assert selected == history[len(history) - len(selected) :]
    users = [m for m in history if m.role is Role.USER]
    if users:
        assert users[-1] in selected  # the latest turn is always given
    if selected != history:
        assert selected[0].role is Role.USER  # cut where a turn starts
        turns = sum(m.role is Role.USER for m in selected)
        assert window.max_turns is None or turns <= window.max_turns
        if turns > 1:
            assert window.max_chars is None or sum(map(message_chars, selected)) <= (
                window.max_chars
            )
    given_messages = translate_messages(selected)
    calls = {
        call.id
        for message in given_messages
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls or ()
    }
    results = {m.tool_call_id for m in given_messages if isinstance(m, ToolMessage)}
    answered = {
        call.tool_call_id for m in selected for call in m.tool_calls if call.content is not None
    }
    assert results <= calls  # no result without its call
    assert answered <= results  # no answered call without its result


def test_a_window_must_keep_something() -> None:
    with pytest.raises(InvalidInputError, match="max_turns must be at least 1"):
        HistoryWindow(max_turns=0)


async def test_the_agent_gets_the_last_turns_and_the_chat_keeps_them_all(tmp_path: Path) -> None:
    async with sqlite_store(tmp_path / "window.db") as store:
        await store.create_chat(ChatCreate(user_uuid=USER, thread_id="w"))
        inner = ScriptedAgent(lambda input: full_turn("w", input.run_id))
        for run in range(3):
            agent = StorageAgent(
                "assistant",
                USER,
                store,
                store,
                inner,
                run_repo=store,
                history_window=HistoryWindow(max_turns=2),
            )
            await collect(agent.run(run_input("w", f"r{run}", [user(f"q{run}")])))
            await agent.persisted()

        given_last = [m.id for m in inner.inputs[-1].messages if m.role == "user"]
        assert given_last == ["q1", "q2"]
        assert agent.chat is not None
        stored = await store.get_chat_messages(agent.chat.chat_uuid)
        assert [m.agui_id for m in stored if m.role is Role.USER] == ["q0", "q1", "q2"]


class RecordingAgent:
    """Answers at once and keeps the messages each run was given."""

    name = "recording"

    def __init__(self) -> None:
        self.given: list[list[str]] = []

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        self.given.append([m.id for m in input.messages])
        for event in full_turn(input.thread_id, input.run_id):
            yield event


async def test_the_server_gives_its_agent_the_window_it_was_built_with(tmp_path: Path) -> None:
    agent = RecordingAgent()
    app = create_app(
        f"sqlite:///{tmp_path / 'server.db'}",
        agent=agent,
        history_window=HistoryWindow(max_turns=1),
    )
    async with LiveServer(app) as server, httpx.AsyncClient() as client:
        for text in ("first", "second"):
            body = server_run_input(text, thread_id="windowed")
            async with client.stream("POST", f"{server.url}/agui", json=body) as response:
                assert response.status_code == 200
                await collect_sse(response)
        asked = body["messages"][-1]["id"]

    assert agent.given[-1][0] == asked  # the earlier turn stays out of the model's view
    assert len(agent.given[0]) == 1
