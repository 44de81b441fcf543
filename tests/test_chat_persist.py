"""Auto-persist: any AG-UI agent, wrapped, saves its chat into a two-method ChatStore."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    FunctionCall,
    RunAgentInput,
    ToolCall,
    ToolMessage,
)

from agui_scripts import (
    ScriptedAgent,
    collect,
    run_error,
    run_finished,
    run_input,
    run_started,
    text_message,
    tool_call,
    user,
)
from threadstore.agui import ChatPersistingAgent, ChatPersistOptions
from threadstore.chatstore import ChatRecord, InMemoryChatStore, Scope

SCOPE = Scope(user_id="u_1", tenant_id="acme")


class DictChatStore:
    """A ChatStore as an app writes one: two methods over a dict."""

    def __init__(self) -> None:
        self.chats: dict[str, ChatRecord] = {}
        self.saves = 0

    def save_chat(self, record: ChatRecord) -> None:
        self.saves += 1
        self.chats[record.chat_id] = record

    def load_chat(self, chat_id: str) -> ChatRecord | None:
        return self.chats.get(chat_id)


class AsyncDictChatStore(DictChatStore):
    """The same two methods, asynchronous."""

    async def save_chat(self, record: ChatRecord) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        super().save_chat(record)

    async def load_chat(self, chat_id: str) -> ChatRecord | None:  # type: ignore[override]
        await asyncio.sleep(0)
        return super().load_chat(chat_id)


class BrokenChatStore:
    """A store whose every save raises."""

    def __init__(self) -> None:
        self.attempts = 0

    def save_chat(self, record: ChatRecord) -> None:
        self.attempts += 1
        raise ConnectionError("the database is down")

    def load_chat(self, chat_id: str) -> ChatRecord | None:
        return None


def tool_run(run_id: str = "run-1") -> list[BaseEvent]:
    """A server-side tool call with its result, between two sentences."""
    return [
        run_started(run_id=run_id),
        *text_message("a1", "Let me check the weather."),
        *tool_call("call-1", "weather", '{"city": "Oslo"}', parent_message_id="a1", result="4 C"),
        *text_message("a2", "Take an umbrella."),
        run_finished(run_id=run_id),
    ]


def client_tool_run(run_id: str = "run-1") -> list[BaseEvent]:
    """A run that stops on a call the client has to execute (no result in the stream)."""
    return [
        run_started(run_id=run_id),
        *text_message("a1", "Which file?"),
        *tool_call("call-9", "pick_file", "{}", parent_message_id="a1"),
        run_finished(run_id=run_id),
    ]


def dumps(events: list[BaseEvent]) -> list[dict[str, Any]]:
    return [event.model_dump(by_alias=True) for event in events]


def roles_and_ids(record: ChatRecord) -> list[tuple[str, str]]:
    return [(message.role, message.id) for message in record.messages]


@pytest.mark.parametrize("store_class", [DictChatStore, AsyncDictChatStore], ids=["sync", "async"])
async def test_a_two_method_store_persists_a_tool_using_run(store_class: type) -> None:
    store = store_class()
    agent = ChatPersistingAgent(
        ScriptedAgent(tool_run()), ChatPersistOptions(store, "chat-42", SCOPE, parent_id="chat-7")
    )

    events = await collect(agent.run(run_input(messages=[user("u1", "Weather in Oslo?")])))

    assert dumps(events) == dumps(tool_run())
    record = store.chats["chat-42"]
    assert record.scope == SCOPE and record.parent_id == "chat-7"
    assert roles_and_ids(record) == [
        ("user", "u1"),
        ("assistant", "a1"),
        ("tool", "call-1-result"),
        ("assistant", "a1-assistant-2"),
    ]
    asked, result, answer = record.messages[1:]
    assert isinstance(asked, AssistantMessage) and asked.content == "Let me check the weather."
    assert asked.tool_calls == [
        ToolCall(id="call-1", function=FunctionCall(name="weather", arguments='{"city": "Oslo"}'))
    ]
    assert isinstance(result, ToolMessage) and result.tool_call_id == "call-1"
    assert result.content == "4 C"
    assert isinstance(answer, AssistantMessage) and answer.content == "Take an umbrella."
    assert store.saves == 1


async def test_the_chat_id_defaults_to_the_runs_thread_id() -> None:
    store = DictChatStore()
    agent = ChatPersistingAgent(ScriptedAgent(tool_run()), ChatPersistOptions(store, None, SCOPE))

    await collect(agent.run(run_input(thread_id="thread-9", messages=[user("u1")])))

    assert list(store.chats) == ["thread-9"]
    assert store.chats["thread-9"].parent_id is None


async def test_a_run_paused_on_a_client_tool_saves_the_call_and_the_next_run_completes_it() -> None:
    store = InMemoryChatStore()
    options = ChatPersistOptions(store, "chat-42", SCOPE)

    await collect(
        ChatPersistingAgent(ScriptedAgent(client_tool_run()), options).run(
            run_input(messages=[user("u1", "Open a file")])
        )
    )
    paused = store.load_chat("chat-42")
    assert paused is not None
    assert roles_and_ids(paused) == [("user", "u1"), ("assistant", "a1")]
    waiting = paused.messages[1]
    assert isinstance(waiting, AssistantMessage) and waiting.tool_calls is not None
    assert [call.id for call in waiting.tool_calls] == ["call-9"]

    # The client executes the tool and sends the history back with the result.
    answered = [
        *paused.messages,
        ToolMessage(id="call-9-result", tool_call_id="call-9", content="notes.txt"),
    ]
    second = [run_started(run_id="run-2"), *text_message("a2", "Opened."), run_finished()]
    await collect(
        ChatPersistingAgent(ScriptedAgent(second), options).run(
            run_input(run_id="run-2", messages=answered)
        )
    )
    done = store.load_chat("chat-42")
    assert done is not None
    assert roles_and_ids(done) == [
        ("user", "u1"),
        ("assistant", "a1"),
        ("tool", "call-9-result"),
        ("assistant", "a2"),
    ]


async def test_an_in_band_run_error_saves_what_came_before_it() -> None:
    store = DictChatStore()
    script = [run_started(), *text_message("a1", "Partial answer"), run_error("model overloaded")]
    agent = ChatPersistingAgent(ScriptedAgent(script), ChatPersistOptions(store, "c", SCOPE))

    events = await collect(agent.run(run_input(messages=[user("u1")])))

    assert dumps(events) == dumps(script)
    record = store.chats["c"]
    assert roles_and_ids(record) == [("user", "u1"), ("assistant", "a1")]
    assert record.messages[1].content == "Partial answer"


async def test_an_agent_that_raises_mid_stream_still_persists_what_it_produced() -> None:
    store = DictChatStore()
    script = [
        run_started(),
        *tool_call("call-1", "search", "{}", result="hits"),
        *text_message("a1", "Half"),
    ]
    crash = ScriptedAgent(script, fail_after=len(script) - 1)  # before TEXT_MESSAGE_END
    agent = ChatPersistingAgent(crash, ChatPersistOptions(store, "c", SCOPE))

    received: list[BaseEvent] = []
    with pytest.raises(RuntimeError, match="scripted crash"):
        async for event in agent.run(run_input(messages=[user("u1")])):
            received.append(event)

    assert dumps(received) == dumps(script[:-1])
    record = store.chats["c"]
    assert [message.role for message in record.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert record.messages[2].content == "hits"
    assert record.messages[3].content == "Half"


async def test_a_throwing_save_leaves_the_stream_identical_to_the_bare_agents(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def agent_input() -> RunAgentInput:
        return run_input(messages=[user("u1", "Weather in Oslo?")])

    bare = await collect(ScriptedAgent(tool_run()).run(agent_input()))
    broken = BrokenChatStore()
    wrapped = ChatPersistingAgent(ScriptedAgent(tool_run()), ChatPersistOptions(broken, "c", SCOPE))
    with caplog.at_level(logging.ERROR, logger="threadstore.agui._chat_persist"):
        received = await collect(wrapped.run(agent_input()))

    assert dumps(received) == dumps(bare)
    assert broken.attempts == 1
    assert "saving chat 'c' failed" in caplog.text
    assert "the database is down" in caplog.text


async def test_a_throwing_save_leaves_a_crashing_agents_error_unchanged() -> None:
    script = [run_started(), *text_message("a1", "Half")]
    bare_error: BaseException | None = None
    bare: list[BaseEvent] = []
    try:
        async for event in ScriptedAgent(script, fail_after=3).run(run_input()):
            bare.append(event)
    except RuntimeError as exc:
        bare_error = exc

    wrapped = ChatPersistingAgent(
        ScriptedAgent(script, fail_after=3), ChatPersistOptions(BrokenChatStore(), "c", SCOPE)
    )
    received: list[BaseEvent] = []
    with pytest.raises(RuntimeError) as raised:
        async for event in wrapped.run(run_input()):
            received.append(event)

    assert dumps(received) == dumps(bare)
    assert type(raised.value) is type(bare_error) and str(raised.value) == str(bare_error)


async def test_events_reach_the_consumer_before_the_agent_produces_the_next_one() -> None:
    script = tool_run()
    inner = ScriptedAgent(script, pause_after=3)
    agent = ChatPersistingAgent(inner, ChatPersistOptions(DictChatStore(), "c", SCOPE))
    stream = agent.run(run_input(messages=[user("u1")]))

    first = [await anext(stream) for _ in range(3)]
    assert dumps(first) == dumps(script[:3])
    inner.gate.set()
    rest = await collect(stream)
    assert dumps(first + rest) == dumps(script)


async def test_a_consumer_that_stops_early_still_gets_the_input_and_partial_turn_saved() -> None:
    store = DictChatStore()
    inner = ScriptedAgent(tool_run())
    agent = ChatPersistingAgent(inner, ChatPersistOptions(store, "c", SCOPE))
    stream = agent.run(run_input(messages=[user("u1")]))

    for _ in range(4):  # RUN_STARTED and the first sentence
        await anext(stream)
    await stream.aclose()

    assert inner.closed
    record = store.chats["c"]
    assert roles_and_ids(record) == [("user", "u1"), ("assistant", "a1")]


async def test_the_wrapper_is_an_agui_agent_named_after_the_inner_one() -> None:
    from threadstore.agui import AGUIAgent

    agent = ChatPersistingAgent(
        ScriptedAgent([], name="weather-bot"), ChatPersistOptions(DictChatStore(), "c", SCOPE)
    )
    assert isinstance(agent, AGUIAgent)
    assert agent.name == "weather-bot"


async def test_an_agent_that_fails_before_streaming_still_gets_the_input_saved() -> None:
    class Refusing:
        name = "refusing"

        def run(self, input: RunAgentInput) -> Any:
            raise PermissionError("no model access")

    store = DictChatStore()
    agent = ChatPersistingAgent(Refusing(), ChatPersistOptions(store, "c", SCOPE))

    with pytest.raises(PermissionError, match="no model access"):
        await collect(agent.run(run_input(messages=[user("u1")])))

    assert roles_and_ids(store.chats["c"]) == [("user", "u1")]


async def test_a_cancelled_run_saves_what_it_produced_and_stays_cancelled() -> None:
    store = DictChatStore()
    inner = ScriptedAgent(tool_run(), pause_after=5)  # after the first sentence
    agent = ChatPersistingAgent(inner, ChatPersistOptions(store, "c", SCOPE))
    consumer = asyncio.create_task(collect(agent.run(run_input(messages=[user("u1")]))))

    await inner.paused.wait()
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer

    assert roles_and_ids(store.chats["c"]) == [("user", "u1"), ("assistant", "a1")]
    assert store.chats["c"].messages[1].content == "Let me check the weather."
