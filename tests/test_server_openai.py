"""The openai agent against a local OpenAI-compatible server, through threadstore."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from ag_ui.core import RunAgentInput
from ag_ui_validate.pytest_plugin import assert_valid_agui

from fake_openai import FakeOpenAI
from server_support import LiveServer, run_input
from threadstore import Store, open_store
from threadstore.server import LOCAL_USER_UUID, create_app
from threadstore.server._agents import load_agent
from threadstore.server._openai_agent import OpenAIAgent, to_openai_messages

CALCULATOR = {
    "name": "calculator",
    "description": "Evaluate arithmetic.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
}


@pytest.fixture
async def upstream() -> AsyncIterator[FakeOpenAI]:
    """A running fake OpenAI-compatible server (its URL is ``upstream.url``)."""
    fake = FakeOpenAI()
    async with LiveServer(fake.app) as server:
        fake.url = server.url  # type: ignore[attr-defined]
        yield fake


async def _run(
    fake: FakeOpenAI, bodies: list[dict[str, Any]], agent: OpenAIAgent | None = None
) -> tuple[list[list[dict[str, Any]]], Store]:
    store = await open_store("memory://")
    agent = agent or OpenAIAgent(
        base_url=f"{fake.url}/v1",  # type: ignore[attr-defined]
        api_key="sk-test",
        model="tiny-model",
    )
    app = create_app(store, agent=agent)
    streams = []
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for body in bodies:
                response = await client.post("/agui", json=body)
                assert response.status_code == 200
                streams.append(
                    [
                        json.loads(line[5:])
                        for line in response.text.split("\n")
                        if line[:5] == "data:"
                    ]
                )
    await agent.aclose()
    return streams, store


async def test_text_and_reasoning_deltas_become_ag_ui_events(upstream: FakeOpenAI) -> None:
    body = run_input("hello there")

    (events,), store = await _run(upstream, [body])

    types = [e["type"] for e in events]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    reasoning = "".join(e["delta"] for e in events if e["type"] == "REASONING_MESSAGE_CONTENT")
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert reasoning == "The user wants an answer."
    assert text == "You said: hello there (turn 1)"
    assert types.index("REASONING_END") < types.index("TEXT_MESSAGE_START")
    assert_valid_agui(events)
    sent = upstream.requests[0]
    assert sent["model"] == "tiny-model"
    assert sent["stream"] is True
    assert sent["messages"] == [{"role": "user", "content": "hello there"}]
    assert upstream.headers[0]["authorization"] == "Bearer sk-test"
    chat = await store.get_chat_by_thread_id(LOCAL_USER_UUID, body["threadId"])
    assert chat is not None
    history = await store.get_chat_messages(chat.chat_uuid)
    # The reasoning is a step nested in the answer it preceded.
    assert [m.role for m in history] == ["user", "assistant"]
    assert history[1].reasonings[0].content == reasoning
    assert history[1].content == text


async def test_tool_call_deltas_become_a_streamed_tool_call(upstream: FakeOpenAI) -> None:
    body = {**run_input("what is 2+2"), "tools": [CALCULATOR]}

    (events,), store = await _run(upstream, [body])

    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    args = "".join(e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS")
    assert start["toolCallId"] == "call_fake_1"
    assert start["toolCallName"] == "calculator"
    assert json.loads(args) == {"expression": "2+2"}
    assert "TOOL_CALL_END" in [e["type"] for e in events]
    assert_valid_agui(events)
    assert upstream.requests[0]["tools"][0]["function"]["name"] == "calculator"
    chat = await store.get_chat_by_thread_id(LOCAL_USER_UUID, body["threadId"])
    assert chat is not None
    calls = [c for m in await store.get_chat_messages(chat.chat_uuid) for c in m.tool_calls]
    assert [(c.name, c.arguments) for c in calls] == [("calculator", args)]


async def test_the_next_turn_sends_the_stored_history_upstream(upstream: FakeOpenAI) -> None:
    first = run_input("my name is Ada")
    second = run_input("what is my name?", thread_id=first["threadId"])

    await _run(upstream, [first, second])

    messages = upstream.requests[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == "You said: my name is Ada (turn 1)"
    assert messages[2]["content"] == "what is my name?"


async def test_an_upstream_http_error_is_a_run_error_that_says_why() -> None:
    fake = FakeOpenAI(status=401)
    async with LiveServer(fake.app) as server:
        fake.url = server.url  # type: ignore[attr-defined]
        (events,), _ = await _run(fake, [run_input()])

    assert events[-1]["type"] == "RUN_ERROR"
    assert events[-1]["code"] == "UPSTREAM_ERROR"
    assert "401" in events[-1]["message"] and "invalid api key" in events[-1]["message"]


async def test_an_error_chunk_mid_stream_closes_what_is_open_then_errors() -> None:
    fake = FakeOpenAI(script=[{"content": "partial"}], error_chunk={"error": {"message": "boom"}})
    async with LiveServer(fake.app) as server:
        fake.url = server.url  # type: ignore[attr-defined]
        (events,), _ = await _run(fake, [run_input()])

    types = [e["type"] for e in events]
    assert types[-2:] == ["TEXT_MESSAGE_END", "RUN_ERROR"]
    assert "boom" in events[-1]["message"]
    assert_valid_agui(events)


async def test_an_unreachable_endpoint_is_a_run_error() -> None:
    agent = OpenAIAgent(base_url="http://127.0.0.1:9/v1", api_key="x")
    fake = FakeOpenAI()

    (events,), _ = await _run(fake, [run_input()], agent=agent)

    assert events[-1]["type"] == "RUN_ERROR"
    assert "could not reach" in events[-1]["message"]


def test_agent_openai_reads_its_settings_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://llm.local/v1/")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_MODEL", "env-model")

    from_env = load_agent("openai")
    chosen = load_agent("openai", model="flag-model")

    assert isinstance(from_env, OpenAIAgent) and isinstance(chosen, OpenAIAgent)
    assert (from_env.base_url, from_env.api_key, from_env.model) == (
        "http://llm.local/v1",
        "sk-env",
        "env-model",
    )
    assert chosen.model == "flag-model"


def test_history_translates_to_chat_completions_messages() -> None:
    run = RunAgentInput.model_validate(
        {
            "threadId": "t",
            "runId": "r",
            "messages": [
                {"id": "s", "role": "system", "content": "be brief"},
                {
                    "id": "u",
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is this?"},
                        {
                            "type": "image",
                            "source": {"type": "url", "value": "https://x/cat.png"},
                        },
                    ],
                },
                {
                    "id": "a",
                    "role": "assistant",
                    "toolCalls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "look", "arguments": "{}"},
                        }
                    ],
                },
                {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "a cat"},
                {"id": "r1", "role": "reasoning", "content": "hidden"},
            ],
        }
    )

    assert to_openai_messages(run) == [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "https://x/cat.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a cat"},
    ]
