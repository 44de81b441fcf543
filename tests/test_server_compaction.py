"""Compaction over HTTP: compact, see the summary where it applies, undo; export and import
keep summaries; the server's policy compacts chats after their runs. On every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest

from conftest import AddMessage, MakeChat
from threadstore import Chat, Role, Store
from threadstore.lifecycle import CompactionPolicy
from threadstore.server import LOCAL_USER_UUID, create_app


async def _client(store: Store, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(store, agent="demo", demo_delay=0, **options)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            yield http


@pytest.fixture
async def client(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    async for http in _client(store):
        yield http


async def _conversation(make_chat: MakeChat, add_message: AddMessage, turns: int) -> Chat:
    created = await make_chat(user_uuid=LOCAL_USER_UUID)
    for turn in range(turns):
        await add_message(created, f"question {turn}", role=Role.USER, agui_id=f"u{turn}")
        await add_message(created, f"answer {turn}", role=Role.ASSISTANT, agui_id=f"a{turn}")
    return created


async def test_compact_shows_the_summary_where_it_applies_and_undo_removes_it(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await _conversation(make_chat, add_message, 6)
    url = f"/api/chats/{chat.chat_uuid}"
    before = (await client.get(f"{url}/messages", params={"limit": 50})).json()

    made = await client.post(f"{url}/compact", json={"keep_messages": 4})

    assert made.status_code == 200, made.text
    summary = made.json()["summary"]
    assert summary["message_count"] == 8
    assert made.json()["detail"] == "summarized 8 message(s) for the agent"
    after = (await client.get(f"{url}/messages", params={"limit": 50})).json()
    assert after["items"] == before["items"]
    assert [s["summary_uuid"] for s in after["summaries"]] == [summary["summary_uuid"]]
    # A page that does not hold the summary's last message does not list it.
    newest = (await client.get(f"{url}/messages", params={"limit": 2, "newest": "true"})).json()
    assert newest["summaries"] == []
    exported = (await client.get(f"{url}/export")).json()
    assert [s["summary_uuid"] for s in exported["summaries"]] == [summary["summary_uuid"]]
    again = await client.post(f"{url}/compact", json={"keep_messages": 4})
    assert again.json()["summary"] is None

    gone = await client.delete(f"{url}/summaries/{summary['summary_uuid']}")
    assert gone.status_code == 204
    assert (await client.get(f"{url}/summaries")).json() == []
    twice = await client.delete(f"{url}/summaries/{summary['summary_uuid']}")
    assert twice.status_code == 404 and "not found" in twice.json()["detail"]


async def test_an_import_keeps_the_summaries_of_the_messages_it_holds(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage, store: Store
) -> None:
    chat = await _conversation(make_chat, add_message, 4)
    url = f"/api/chats/{chat.chat_uuid}"
    await client.post(f"{url}/compact", json={"keep_messages": 2})
    document = (await client.get(f"{url}/export")).json()

    imported = await client.post("/api/chats/import", json=document, params={"thread_id": "copy"})

    assert imported.status_code == 201, imported.text
    copy = imported.json()["chat_uuid"]
    (summary,) = (await client.get(f"/api/chats/{copy}/summaries")).json()
    assert summary["summary_uuid"] != document["summaries"][0]["summary_uuid"]
    assert summary["content"] == document["summaries"][0]["content"]
    given = await store.branches.agent_history(UUID(copy))
    assert [m.content for m in given.messages] == ["question 3", "answer 3"]


async def test_bad_compaction_requests_are_clear_errors(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await _conversation(make_chat, add_message, 2)
    someone_else = await make_chat(user_uuid=uuid4())

    negative = await client.post(f"/api/chats/{chat.chat_uuid}/compact", json={"keep_messages": -1})
    wrong = await client.post(f"/api/chats/{chat.chat_uuid}/compact", json={"keep": "all"})
    theirs = await client.post(f"/api/chats/{someone_else.chat_uuid}/compact")
    unknown = await client.get(f"/api/chats/{uuid4()}/summaries")

    assert negative.status_code == 422 and "keep_messages" in negative.text
    assert wrong.status_code == 200  # unknown fields are ignored, as elsewhere
    assert theirs.status_code == 404 and unknown.status_code == 404
    assert (await client.get(f"/api/chats/{someone_else.chat_uuid}/messages")).status_code == 404


async def test_the_servers_policy_compacts_a_chat_after_its_run(store: Store) -> None:
    policy = CompactionPolicy(max_messages=5, keep_messages=2)
    app = create_app(store, agent="demo", demo_delay=0, compaction=policy)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            for n in range(3):
                body = {
                    "threadId": "t",
                    "runId": f"r{n}",
                    "messages": [{"id": f"u{n}", "role": "user", "content": f"What is {n} + 1?"}],
                    "tools": [],
                    "context": [],
                    "forwardedProps": {},
                }
                assert (await client.post("/agui", json=body)).status_code == 200
                state = app.state.threadstore
                handle = state.manager.get("t", f"r{n}", user_uuid=LOCAL_USER_UUID)
                if handle is not None:
                    await handle.wait()
                await state.compactor.drain()
            info = (await client.get("/api/threads/t")).json()
            url = f"/api/chats/{info['chat']['chat_uuid']}"
            summaries = (await client.get(f"{url}/summaries")).json()
            messages = (await client.get(f"{url}/messages", params={"limit": 100})).json()

    # Each demo turn stores a question and its answers: once over five, a summary covers
    # all but the newest messages (a later one covers the earlier summary too), and the
    # chat still holds every message.
    assert summaries and {s["summarizer"] for s in summaries} == {"deterministic_summary"}
    assert summaries[0]["message_count"] < len(messages["items"])
    assert len(messages["items"]) >= 9
