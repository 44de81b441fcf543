"""``GET /api/chats/{id}/ui``: a chat as the chat engine's UI messages, paged by whole turns."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from conftest import MakeChat
from threadstore import Store
from threadstore.server import create_app


@pytest.fixture
async def client(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(store, agent="demo", demo_delay=0)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            yield http


async def _run(client: httpx.AsyncClient, thread: str, number: int, question: str) -> None:
    body = {
        "threadId": thread,
        "runId": f"r{number}",
        "messages": [{"id": f"u{number}", "role": "user", "content": question}],
    }
    async with client.stream("POST", "/agui", json=body) as response:
        assert response.status_code == 200
        await response.aread()


async def _chat_uuid(client: httpx.AsyncClient, thread: str) -> str:
    chats = (await client.get("/api/chats")).json()["items"]
    return next(chat["chat_uuid"] for chat in chats if chat["thread_id"] == thread)


def _kinds(message: dict[str, Any]) -> list[str]:
    return [part["type"] for part in message["parts"]]


async def test_a_demo_turn_reads_as_one_assistant_message_with_its_parts_in_order(
    client: httpx.AsyncClient,
) -> None:
    await _run(client, "t", 0, "What is 12 * 7 + 3?")
    chat = await _chat_uuid(client, "t")

    page = (await client.get(f"/api/chats/{chat}/ui", params={"newest": "true"})).json()

    user, assistant = page["items"]
    assert user == {
        "id": "u0",
        "role": "user",
        "content": "What is 12 * 7 + 3?",
        "parts": [{"type": "text", "text": "What is 12 * 7 + 3?", "state": "done"}],
    }
    assert assistant["role"] == "assistant"
    assert _kinds(assistant) == ["reasoning", "text", "tool", "text"]
    text = [part["text"] for part in assistant["parts"] if part["type"] == "text"]
    assert text == [
        "Let me work that out.",
        "12 * 7 + 3 = 87. I used the calculator tool to be sure.",
    ]
    assert assistant["content"] == "".join(text)
    (call,) = assistant["tool_calls"]
    assert call["tool_name"] == "calculator"
    assert call["state"] == "result"
    assert page["prev_cursor"] is None and page["next_cursor"] is None


async def test_pages_never_cut_a_turn_and_together_give_the_whole_chat(
    client: httpx.AsyncClient,
) -> None:
    for number in range(4):
        await _run(client, "long", number, f"What is {number} + 1?")
    chat = await _chat_uuid(client, "long")
    whole = (await client.get(f"/api/chats/{chat}/ui", params={"limit": 1000})).json()["items"]
    assert [m["role"] for m in whole] == ["user", "assistant"] * 4

    # Backwards from the newest, two stored messages at a time: each page ends and starts
    # at a turn's edge, so every UI message arrives whole, exactly once.
    pages: list[list[dict[str, Any]]] = []
    params: dict[str, Any] = {"newest": "true", "limit": 2}
    while True:
        page = (await client.get(f"/api/chats/{chat}/ui", params=params)).json()
        pages.insert(0, page["items"])
        if page["prev_cursor"] is None:
            break
        params = {"before": page["prev_cursor"], "limit": 2}
    assert [m for page in pages for m in page] == whole

    forward: list[dict[str, Any]] = []
    params = {"limit": 2}
    while True:
        page = (await client.get(f"/api/chats/{chat}/ui", params=params)).json()
        forward += page["items"]
        if page["next_cursor"] is None:
            break
        params = {"after": page["next_cursor"], "limit": 2}
    assert forward == whole


async def test_another_users_chat_is_not_found(
    client: httpx.AsyncClient, make_chat: MakeChat
) -> None:
    theirs = await make_chat()
    response = await client.get(f"/api/chats/{theirs.chat_uuid}/ui")
    assert response.status_code == 404
