"""A real ``agent_framework.Agent`` with the threadstore history provider, on every backend.

The chat client is the framework's own base with its function-invocation layer and a
scripted model (``af_support``), so every run goes through the framework's provider
pipeline: ``before_run`` loads, the tool loop runs, ``after_run`` stores.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import pytest
from agent_framework import (
    CharacterEstimatorTokenizer,
    CompactionProvider,
    Content,
    ContextProvider,
    InMemoryHistoryProvider,
    Message,
    SlidingWindowStrategy,
    TokenBudgetComposedStrategy,
)

from af_support import ScriptedChatClient, call, make_agent, say, texts
from threadstore import Store
from threadstore.errors import ConfigurationError
from threadstore.faces.agent_framework import ThreadstoreHistoryProvider, keep_last_messages

WEATHER_TURN = [
    ("user", "Weather in Oslo?"),
    ("assistant", "function_call"),
    ("tool", "function_result"),
    ("assistant", "Sunny in Oslo."),
]


def _provider(store: Store, **options: Any) -> ThreadstoreHistoryProvider:
    return ThreadstoreHistoryProvider(store, uuid4(), **options)


async def _history(provider: ThreadstoreHistoryProvider, session: Any) -> list[tuple[str, str]]:
    return texts(
        await provider.get_messages(session.session_id, state=session.state[provider.source_id])
    )


async def test_the_second_run_of_a_session_sees_the_first(store: Store) -> None:
    provider = _provider(store)
    client = ScriptedChatClient(
        [call("weather", "c1", city="Oslo"), say("Sunny in Oslo."), say("You asked about Oslo.")]
    )
    agent = make_agent(client, [provider])
    session = agent.create_session()

    await agent.run("Weather in Oslo?", session=session)
    answer = await agent.run("What did I ask?", session=session)

    assert answer.text == "You asked about Oslo."
    assert texts(client.seen[-1]) == [*WEATHER_TURN, ("user", "What did I ask?")]
    assert await _history(provider, session) == [
        *WEATHER_TURN,
        ("user", "What did I ask?"),
        ("assistant", "You asked about Oslo."),
    ]


async def test_a_streamed_run_is_stored_like_any_other(store: Store) -> None:
    provider = _provider(store)
    client = ScriptedChatClient(
        [call("weather", "c1", city="Oslo"), say("Sunny in Oslo."), say("Oslo, yes.")]
    )
    agent = make_agent(client, [provider])
    session = agent.create_session()

    async for _ in agent.run("Weather in Oslo?", session=session, stream=True):
        pass
    answer = await agent.run("Which city?", session=session)

    assert answer.text == "Oslo, yes."
    assert texts(client.seen[-1]) == [*WEATHER_TURN, ("user", "Which city?")]
    assert len(await _history(provider, session)) == 6


async def test_one_provider_serves_many_sessions_apart(store: Store) -> None:
    provider = _provider(store)
    client = ScriptedChatClient([say("one"), say("two"), say("three")])
    agent = make_agent(client, [provider])
    first, second = agent.create_session(), agent.create_session()

    await agent.run("to the first", session=first)
    await agent.run("to the second", session=second)
    await agent.run("first again", session=first)

    assert texts(client.seen[-1]) == [
        ("user", "to the first"),
        ("assistant", "one"),
        ("user", "first again"),
    ]
    assert await _history(provider, second) == [("user", "to the second"), ("assistant", "two")]


@pytest.mark.parametrize("per_service_call", [False, True], ids=["per-run", "per-model-call"])
async def test_a_tool_loop_stores_each_message_once(store: Store, per_service_call: bool) -> None:
    # The framework's report: persisting after every model call of a tool loop re-appended
    # the whole conversation so far each time.
    provider = _provider(store)
    client = ScriptedChatClient(
        [
            call("weather", "c1", city="Oslo"),
            call("weather", "c2", city="Bergen"),
            say("Sunny in both."),
            say("Noted."),
        ]
    )
    agent = make_agent(
        client, [provider], require_per_service_call_history_persistence=per_service_call
    )
    session = agent.create_session()

    await agent.run("Weather in Oslo and Bergen?", session=session)
    await agent.run("Thanks", session=session)

    expected = [
        ("user", "Weather in Oslo and Bergen?"),
        ("assistant", "function_call"),
        ("tool", "function_result"),
        ("assistant", "function_call"),
        ("tool", "function_result"),
        ("assistant", "Sunny in both."),
        ("user", "Thanks"),
        ("assistant", "Noted."),
    ]
    assert await _history(provider, session) == expected
    assert texts(client.seen[-1]) == expected[:-1]


async def test_a_resumed_serialized_session_does_not_duplicate_history(store: Store) -> None:
    from agent_framework import AgentSession

    provider = _provider(store)
    client = ScriptedChatClient([say("Hello."), say("Again.")])
    agent = make_agent(client, [provider])
    session = agent.create_session()
    await agent.run("Hi", session=session)

    resumed = AgentSession.from_dict(session.to_dict())
    await agent.run("Hi again", session=resumed)

    assert texts(client.seen[-1]) == [("user", "Hi"), ("assistant", "Hello."), ("user", "Hi again")]
    assert await _history(provider, resumed) == [
        ("user", "Hi"),
        ("assistant", "Hello."),
        ("user", "Hi again"),
        ("assistant", "Again."),
    ]


async def test_a_client_sending_its_whole_transcript_stores_and_shows_each_turn_once(
    store: Store,
) -> None:
    # The AG-UI shape: a stateless client re-sends every message it has each time.
    provider = _provider(store)
    client = ScriptedChatClient([say("Hello.", message_id="a1"), say("Fine.", message_id="a2")])
    agent = make_agent(client, [provider])
    session = agent.create_session()
    first = Message("user", ["Hi"], message_id="u1")
    reply = await agent.run([first], session=session)

    transcript = [first, *reply.messages, Message("user", ["How are you?"], message_id="u2")]
    await agent.run(transcript, session=session)

    assert texts(client.seen[-1]) == [
        ("user", "Hi"),
        ("assistant", "Hello."),
        ("user", "How are you?"),
    ]
    assert await _history(provider, session) == [
        ("user", "Hi"),
        ("assistant", "Hello."),
        ("user", "How are you?"),
        ("assistant", "Fine."),
    ]


async def test_a_run_that_raises_stores_nothing_and_a_retry_stores_once(store: Store) -> None:
    provider = _provider(store)
    client = ScriptedChatClient(
        [call("weather", "c1", city="Oslo"), RuntimeError("model unavailable")]
    )
    agent = make_agent(client, [provider])
    session = agent.create_session()

    with pytest.raises(RuntimeError, match="model unavailable"):
        await agent.run("Weather in Oslo?", session=session)
    assert await _history(provider, session) == []

    client.replies = [call("weather", "c1", city="Oslo"), say("Sunny in Oslo.")]
    await agent.run("Weather in Oslo?", session=session)
    assert await _history(provider, session) == WEATHER_TURN


async def test_a_failed_invocation_stores_not_even_its_request(store: Store) -> None:
    # The seed's providers return at once when the run failed; a context with no
    # response is how a failed invocation reaches the hook here.
    from agent_framework import SessionContext

    provider = _provider(store)
    agent = make_agent(ScriptedChatClient([]), [provider])
    session = agent.create_session()
    failed = SessionContext(
        session_id=session.session_id,
        input_messages=[Message(role="user", contents=["Weather in Oslo?"])],
    )

    await provider.after_run(
        agent=agent,
        session=session,
        context=failed,
        state=session.state.setdefault(provider.source_id, {}),
    )

    assert await _history(provider, session) == []


async def test_the_session_state_is_typed_and_serializes_with_the_session(store: Store) -> None:
    from agent_framework import AgentSession

    from threadstore.faces.agent_framework import ThreadstoreSessionState

    provider = _provider(store)
    agent = make_agent(ScriptedChatClient([say("Hi.")]), [provider])
    session = agent.create_session()
    typed = provider.session_state

    state = typed.get_or_initialize_state(session)
    await agent.run("Hello", session=session)

    assert isinstance(state, ThreadstoreSessionState) and typed.state_key == "threadstore"
    assert state.thread_id == session.session_id
    chat = await provider.get_chat(session.session_id, session.state[provider.source_id])
    assert chat is not None and chat.thread_id == state.thread_id
    typed.save_state(session, ThreadstoreSessionState(thread_id="moved"))
    restored = AgentSession.from_dict(session.to_dict())
    assert typed.get_or_initialize_state(restored).thread_id == "moved"
    assert restored.state["threadstore"] == {"thread_id": "moved"}  # the stored shape as before


def test_a_state_entry_of_another_shape_is_made_anew() -> None:
    from agent_framework import AgentSession

    from threadstore.faces.agent_framework import ProviderSessionState, ThreadstoreSessionState

    typed = ProviderSessionState(
        ThreadstoreSessionState, lambda s: ThreadstoreSessionState(thread_id="new"), "k"
    )
    session = AgentSession(session_id="s-1")
    session.state["k"] = {"thread_id": 42}

    assert typed.get_or_initialize_state(session).thread_id == "new"


async def test_a_service_managed_session_skips_local_history(store: Store) -> None:
    provider = _provider(store)
    client = ScriptedChatClient([say("From the service.")])
    agent = make_agent(client, [provider])
    session = agent.get_session(service_session_id="conversation-1")

    await agent.run("Continue this conversation.", session=session)

    assert texts(client.seen[0]) == [("user", "Continue this conversation.")]
    assert (
        await provider.get_chat(session.session_id, session.state.get(provider.source_id)) is None
    )


async def test_only_one_history_provider_may_load(store: Store) -> None:
    agent = make_agent(
        ScriptedChatClient([say("never")]),
        [_provider(store), InMemoryHistoryProvider("memory", load_messages=True)],
    )

    with pytest.raises(ConfigurationError, match="only one history provider may load"):
        await agent.run("Hi", session=agent.create_session())


async def test_an_audit_copy_beside_the_in_memory_history(store: Store) -> None:
    audit = _provider(store, load_messages=False)
    client = ScriptedChatClient([say("one"), say("two")])
    agent = make_agent(client, [InMemoryHistoryProvider("memory"), audit])
    session = agent.create_session()

    await agent.run("first", session=session)
    await agent.run("second", session=session)

    assert texts(client.seen[-1]) == [("user", "first"), ("assistant", "one"), ("user", "second")]
    assert texts(
        await audit.get_messages(session.session_id, state=session.state["threadstore"])
    ) == [
        ("user", "first"),
        ("assistant", "one"),
        ("user", "second"),
        ("assistant", "two"),
    ]


class _Notes(ContextProvider):
    """Adds one retrieved note to every run."""

    async def before_run(self, *, agent: Any, session: Any, context: Any, state: Any) -> None:
        context.extend_messages(self, [Message("user", ["note: likes Italian food"])])


@pytest.mark.parametrize(
    ("options", "stored"),
    [
        ({}, ["hi", "hello"]),
        ({"store_inputs": False}, ["hello"]),
        ({"store_outputs": False}, ["hi"]),
        ({"store_context_messages": True}, ["note: likes Italian food", "hi", "hello"]),
        ({"store_context_messages": True, "store_context_from": {"other"}}, ["hi", "hello"]),
        (
            {"store_context_messages": True, "store_context_from": {"notes"}},
            ["note: likes Italian food", "hi", "hello"],
        ),
    ],
)
async def test_the_base_class_store_flags_decide_what_is_stored(
    store: Store, options: dict[str, Any], stored: list[str]
) -> None:
    provider = _provider(store, **options)
    agent = make_agent(ScriptedChatClient([say("hello")]), [_Notes("notes"), provider])
    session = agent.create_session()

    await agent.run("hi", session=session)

    assert [text for _, text in await _history(provider, session)] == stored


async def test_the_message_filter_limits_what_the_model_sees(store: Store) -> None:
    provider = _provider(store, message_filter=keep_last_messages(2))
    client = ScriptedChatClient(
        [call("weather", "c1", city="Oslo"), say("Sunny in Oslo."), say("Bye.")]
    )
    agent = make_agent(client, [provider])
    session = agent.create_session()
    await agent.run("Weather in Oslo?", session=session)

    await agent.run("Bye", session=session)

    # The last two would start with a tool result whose call is cut off: it goes too.
    assert texts(client.seen[-1]) == [("assistant", "Sunny in Oslo."), ("user", "Bye")]


@pytest.mark.parametrize("strategy", ["sliding-window", "token-budget"])
async def test_the_frameworks_compaction_strategies_work_on_loaded_history(
    store: Store, strategy: str
) -> None:
    provider = _provider(store)
    if strategy == "sliding-window":
        before: Any = SlidingWindowStrategy(keep_last_groups=3)
    else:
        before = TokenBudgetComposedStrategy(
            token_budget=60,
            tokenizer=CharacterEstimatorTokenizer(),
            strategies=[SlidingWindowStrategy(keep_last_groups=3)],
        )
    compaction = CompactionProvider(before_strategy=before, history_source_id=provider.source_id)
    replies = []
    for turn in range(4):
        replies += [call("weather", f"c{turn}", city=f"city{turn}"), say(f"answer {turn}")]
    client = ScriptedChatClient([*replies, say("done")])
    agent = make_agent(client, [provider, compaction])
    session = agent.create_session()
    for turn in range(4):
        await agent.run(f"question {turn}", session=session)

    await agent.run("last question", session=session)

    seen = client.seen[-1]
    assert len(seen) < 17  # the whole history (16) plus the input
    assert texts(seen)[-1] == ("user", "last question")
    calls = {c.call_id for m in seen for c in m.contents if c.type == "function_call"}
    results = {c.call_id for m in seen for c in m.contents if c.type == "function_result"}
    assert calls == results
    # Compaction shapes the model's view; the stored history keeps every message.
    assert len(await _history(provider, session)) == 18


async def test_results_of_a_parallel_tool_batch_go_on_their_calls(store: Store) -> None:
    provider = _provider(store)
    both = Message(
        "assistant",
        [
            Content.from_function_call("c1", "weather", arguments='{"city": "Oslo"}'),
            Content.from_function_call("c2", "weather", arguments='{"city": "Rome"}'),
        ],
    )
    agent = make_agent(ScriptedChatClient([both, say("Both sunny.")]), [provider])
    session = agent.create_session()

    await agent.run("Oslo and Rome?", session=session)

    chat = await provider.get_chat(session.session_id, session.state[provider.source_id])
    assert chat is not None
    records = await store.get_chat_messages(chat.chat_uuid)
    calls = records[1].tool_calls
    assert [(c.tool_call_id, c.content) for c in calls] == [
        ("c1", "sunny in Oslo"),
        ("c2", "sunny in Rome"),
    ]
