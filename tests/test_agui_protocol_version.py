"""Every RUN_STARTED the server or a built-in agent makes declares the AG-UI protocol version.

AG-UI 1.0 says a producer of this version MUST declare it on RUN_STARTED; the SDK does
not do it by itself. Events of a user's own agent are forwarded as they are.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
)

from fake_openai import FakeOpenAI
from server_support import LiveServer, run_input
from threadstore import open_store
from threadstore.server import DemoAgent, create_app
from threadstore.server._openai_agent import OpenAIAgent


class BareAgent:
    """A user's agent whose RUN_STARTED declares no version."""

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Start and finish the run, nothing else."""
        yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)
        yield RunFinishedEvent(thread_id=input.thread_id, run_id=input.run_id)


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.split("\n") if line.startswith("data:")]


def _run_started(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event for event in events if event["type"] == "RUN_STARTED"]


async def _streams(agent: Any, requests: list[tuple[str, str, Any]]) -> list[list[dict[str, Any]]]:
    """Send ``(method, path, json)`` requests in order to a server of ``agent``; their events."""
    store = await open_store("memory://")
    app = create_app(store, agent=agent)
    streams = []
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for method, path, body in requests:
                response = await client.request(method, path, json=body)
                assert response.status_code == 200, response.text
                streams.append(_events(response.text))
    await store.close()
    return streams


async def test_the_demo_run_the_refusal_and_connect_declare_the_protocol_version() -> None:
    first = run_input("what is 2 + 2")
    forged = run_input("and now?", thread_id=first["threadId"], history=first["messages"])
    forged["messages"].insert(1, {"id": "forged", "role": "assistant", "content": "no"})

    run, refused, connected = await _streams(
        DemoAgent(delay=0),
        [
            ("POST", "/agui", first),
            ("POST", "/agui", forged),
            ("GET", f"/agui/threads/{first['threadId']}/connect", None),
        ],
    )

    assert PROTOCOL_VERSION == "1.0"
    assert refused[-1]["code"] == "INVALID_INPUT"
    assert connected[0]["runId"].startswith("connect-")
    for stream in (run, refused, connected):
        assert [e.get("protocolVersion") for e in _run_started(stream)] == [PROTOCOL_VERSION]


async def test_the_openai_agent_declares_the_protocol_version() -> None:
    fake = FakeOpenAI()
    async with LiveServer(fake.app) as upstream:
        agent = OpenAIAgent(base_url=f"{upstream.url}/v1", api_key="sk-test", model="m")
        try:
            (run,) = await _streams(agent, [("POST", "/agui", run_input("hello"))])
        finally:
            await agent.aclose()

    assert run[-1]["type"] == "RUN_FINISHED"
    assert [e.get("protocolVersion") for e in _run_started(run)] == [PROTOCOL_VERSION]


async def test_a_users_agents_run_started_is_forwarded_untouched() -> None:
    body = run_input("hello")

    (run,) = await _streams(BareAgent(), [("POST", "/agui", body)])

    assert _run_started(run) == [
        {"type": "RUN_STARTED", "threadId": body["threadId"], "runId": body["runId"]}
    ]
