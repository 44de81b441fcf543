"""The chat-history JSON API, on every backend, through the app's ASGI interface."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any
from uuid import uuid4

import httpx
import pytest

from conftest import AddMessage, MakeChat
from threadstore import Chat, MessageReasoningCreate, MessageToolCallCreate, Role, Store
from threadstore.server import LOCAL_USER_UUID, Limits, create_app
from threadstore.store._queries import MAX_PAGE_SIZE


@pytest.fixture
async def client(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an app serving ``store`` as the single local user."""
    app = create_app(store, agent="demo", demo_delay=0, limits=Limits(max_name_chars=40))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            yield http


async def _conversation(
    make_chat: MakeChat, add_message: AddMessage, turns: int, **chat: str
) -> Chat:
    created = await make_chat(user_uuid=LOCAL_USER_UUID, **chat)
    for turn in range(turns):
        await add_message(created, f"question {turn}", role=Role.USER, agui_id=f"u{turn}")
        await add_message(created, f"answer {turn}", role=Role.ASSISTANT, agui_id=f"a{turn}")
    return created


async def test_listing_shows_my_chats_newest_first_with_their_last_message(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage
) -> None:
    first = await _conversation(make_chat, add_message, 1, name="first")
    second = await _conversation(make_chat, add_message, 2, name="second")
    await make_chat(user_uuid=uuid4(), name="someone else's")

    response = await client.get("/api/chats")

    assert response.status_code == 200
    items = response.json()["items"]
    assert [item["name"] for item in items] == ["second", "first"]
    assert items[0]["chat_uuid"] == str(second.chat_uuid)
    assert items[0]["last_message"]["content"] == "answer 1"
    assert items[1]["chat_uuid"] == str(first.chat_uuid)
    assert response.json()["next_cursor"] is None


async def test_listing_pages_with_a_cursor_without_gaps_or_repeats(
    client: httpx.AsyncClient, make_chat: MakeChat
) -> None:
    made = [await make_chat(user_uuid=LOCAL_USER_UUID, name=f"c{i}") for i in range(5)]

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, str | int] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        body = (await client.get("/api/chats", params=params)).json()
        seen += [item["chat_uuid"] for item in body["items"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break

    assert pages == 3
    assert seen == [str(chat.chat_uuid) for chat in reversed(made)]


async def test_a_chat_and_its_messages_page_forward_and_back(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await _conversation(make_chat, add_message, 3)  # six messages

    got = await client.get(f"/api/chats/{chat.chat_uuid}")
    first = (await client.get(f"/api/chats/{chat.chat_uuid}/messages", params={"limit": 4})).json()
    rest = (
        await client.get(
            f"/api/chats/{chat.chat_uuid}/messages",
            params={"limit": 4, "after": first["next_cursor"]},
        )
    ).json()
    newest = (
        await client.get(
            f"/api/chats/{chat.chat_uuid}/messages", params={"limit": 2, "newest": "true"}
        )
    ).json()
    older = (
        await client.get(
            f"/api/chats/{chat.chat_uuid}/messages",
            params={"limit": 2, "before": newest["prev_cursor"]},
        )
    ).json()

    assert got.json()["thread_id"] == chat.thread_id
    contents = [m["content"] for m in first["items"] + rest["items"]]
    assert contents == [
        "question 0",
        "answer 0",
        "question 1",
        "answer 1",
        "question 2",
        "answer 2",
    ]
    assert rest["next_cursor"] is None
    assert [m["content"] for m in newest["items"]] == ["question 2", "answer 2"]
    assert [m["content"] for m in older["items"]] == ["question 1", "answer 1"]


async def test_the_largest_page_size_pages_a_long_chat_both_ways(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage
) -> None:
    template = await _conversation(make_chat, add_message, 1)
    document = (await client.get(f"/api/chats/{template.chat_uuid}/export")).json()
    message = document["messages"][0]
    document["messages"] = [
        {**message, "message_uuid": str(uuid4()), "agui_id": f"m{i}", "content": f"m{i}"}
        for i in range(MAX_PAGE_SIZE + 1)
    ]
    imported = await client.post("/api/chats/import", json=document, params={"thread_id": "long"})
    url = f"/api/chats/{imported.json()['chat_uuid']}/messages"

    async def page(**params: str | int) -> dict[str, Any]:
        response = await client.get(url, params={"limit": MAX_PAGE_SIZE, **params})
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    first = await page()
    rest = await page(after=first["next_cursor"])
    full_last = await page(after=first["items"][0]["seq"])
    newest = await page(newest="true")
    oldest = await page(before=newest["prev_cursor"])

    def contents(body: dict[str, Any]) -> list[str]:
        return [m["content"] for m in body["items"]]

    every = [f"m{i}" for i in range(MAX_PAGE_SIZE + 1)]
    assert contents(first) == every[:-1] and first["next_cursor"] is not None
    assert contents(rest) == every[-1:] and rest["next_cursor"] is None
    assert contents(full_last) == every[1:] and full_last["next_cursor"] is None
    assert contents(newest) == every[1:] and newest["prev_cursor"] is not None
    assert contents(oldest) == every[:1] and oldest["prev_cursor"] is None


async def test_messages_carry_their_tool_calls_and_reasoning(
    client: httpx.AsyncClient, store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat(user_uuid=LOCAL_USER_UUID)
    reply = await add_message(chat, "Let me check.", role=Role.ASSISTANT)
    await store.create_message_reasoning(
        MessageReasoningCreate(message_uuid=reply.message_uuid, content="think")
    )
    await store.create_message_tool_call(
        MessageToolCallCreate(
            message_uuid=reply.message_uuid, tool_call_id="c1", name="clock", content="noon"
        )
    )

    items = (await client.get(f"/api/chats/{chat.chat_uuid}/messages")).json()["items"]

    assert items[0]["reasonings"][0]["content"] == "think"
    assert items[0]["tool_calls"][0]["name"] == "clock"
    assert items[0]["tool_calls"][0]["content"] == "noon"


async def test_rename_changes_the_name_and_rejects_blank_or_long_names(
    client: httpx.AsyncClient, make_chat: MakeChat
) -> None:
    chat = await make_chat(user_uuid=LOCAL_USER_UUID, name="old")
    url = f"/api/chats/{chat.chat_uuid}"

    renamed = await client.patch(url, json={"name": "  Trip plans  "})
    blank = await client.patch(url, json={"name": "   "})
    too_long = await client.patch(url, json={"name": "x" * 41})

    assert renamed.status_code == 200
    assert renamed.json()["name"] == "Trip plans"
    assert blank.status_code == 422
    assert too_long.status_code == 422
    assert "40" in too_long.json()["detail"]
    assert (await client.get(url)).json()["name"] == "Trip plans"


async def test_delete_removes_the_chat_and_its_messages(
    client: httpx.AsyncClient, store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await _conversation(make_chat, add_message, 1)

    deleted = await client.delete(f"/api/chats/{chat.chat_uuid}")
    again = await client.delete(f"/api/chats/{chat.chat_uuid}")

    assert deleted.status_code == 204
    assert again.status_code == 404
    assert await store.chats.get_chat(chat.chat_uuid) is None
    assert (await client.get(f"/api/chats/{chat.chat_uuid}/messages")).status_code == 404


async def test_export_then_import_recreates_the_chat_as_a_new_one(
    client: httpx.AsyncClient, store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await _conversation(make_chat, add_message, 2, name="keep me")
    reply = (await store.get_chat_messages(chat.chat_uuid))[-1]
    await store.create_message_tool_call(
        MessageToolCallCreate(
            message_uuid=reply.message_uuid, tool_call_id="c1", name="calculator", content="4"
        )
    )
    exported = (await client.get(f"/api/chats/{chat.chat_uuid}/export")).json()

    conflict = await client.post("/api/chats/import", json=exported)
    imported = await client.post(
        "/api/chats/import", json=exported, params={"thread_id": "copy-of-it"}
    )

    assert exported["format"] == "threadstore.chat"
    assert conflict.status_code == 409
    assert imported.status_code == 201
    copy = imported.json()
    assert copy["chat_uuid"] != str(chat.chat_uuid)
    assert copy["thread_id"] == "copy-of-it"
    assert copy["name"] == "keep me"
    messages = (await client.get(f"/api/chats/{copy['chat_uuid']}/messages")).json()["items"]
    assert [m["content"] for m in messages] == [m["content"] for m in exported["messages"]]
    assert [m["role"] for m in messages] == [m["role"] for m in exported["messages"]]
    assert messages[-1]["tool_calls"][0]["content"] == "4"
    assert {m["message_uuid"] for m in messages}.isdisjoint(
        {m["message_uuid"] for m in exported["messages"]}
    )


async def test_a_failed_import_stores_nothing(client: httpx.AsyncClient, store: Store) -> None:
    document = {
        "chat": {
            "chat_uuid": str(uuid4()),
            "user_uuid": str(uuid4()),
            "thread_id": "broken",
            "dedup_key": "x",
        },
        "messages": [
            {"message_uuid": str(uuid4()), "chat_uuid": str(uuid4()), "role": "user"},
            {"message_uuid": str(uuid4()), "chat_uuid": str(uuid4()), "role": "no-such-role"},
        ],
    }

    response = await client.post("/api/chats/import", json=document)

    assert response.status_code == 422
    assert "messages.1.role" in response.json()["detail"]
    assert await store.get_chat_by_thread_id(LOCAL_USER_UUID, "broken") is None


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/chats/{id}"),
        ("GET", "/api/chats/{id}/messages"),
        ("GET", "/api/chats/{id}/export"),
        ("PATCH", "/api/chats/{id}"),
        ("DELETE", "/api/chats/{id}"),
    ],
)
async def test_an_unknown_chat_is_a_404(client: httpx.AsyncClient, method: str, path: str) -> None:
    response = await client.request(
        method, path.format(id=uuid4()), json={"name": "x"} if method == "PATCH" else None
    )

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


async def test_bad_ids_and_cursors_are_clear_4xx(client: httpx.AsyncClient) -> None:
    not_a_uuid = await client.get("/api/chats/not-a-uuid")
    bad_cursor = await client.get("/api/chats", params={"cursor": "%%%"})
    bad_limit = await client.get("/api/chats", params={"limit": 0})
    both = await client.get(f"/api/chats/{uuid4()}/messages", params={"after": 1, "before": 2})

    assert not_a_uuid.status_code == 422
    assert "chat_uuid" in not_a_uuid.json()["detail"]
    assert bad_cursor.status_code == 422
    assert "cursor" in bad_cursor.json()["detail"]
    assert bad_limit.status_code == 422
    assert both.status_code == 422


async def test_the_openapi_document_describes_every_route(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]

    assert set(paths) >= {
        "/agui",
        "/agui/threads/{thread_id}/runs/{run_id}/events",
        "/agui/threads/{thread_id}/runs/{run_id}/cancel",
        "/agui/threads/{thread_id}/connect",
        "/api/chats",
        "/api/chats/{chat_uuid}",
        "/api/chats/{chat_uuid}/messages",
        "/api/chats/{chat_uuid}/export",
        "/api/chats/import",
    }
    assert "text/event-stream" in paths["/agui"]["post"]["responses"]["200"]["content"]


# --- imports are checked whole and refused whole --------------------------------------------


async def _exported(client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage) -> Any:
    chat = await _conversation(make_chat, add_message, 2)
    return (await client.get(f"/api/chats/{chat.chat_uuid}/export")).json()


def _set_parent(document: Any, child: int, parent: int | None) -> None:
    messages = document["messages"]
    messages[child]["parent_uuid"] = None if parent is None else messages[parent]["message_uuid"]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda d: d.update(export_version=999), "export_version 999 is not one"),
        (lambda d: d.update(export_version=0), "export_version 0 is not one"),
        (lambda d: d.update(format_version=999), "format_version 999 is not one"),
        (
            lambda d: d["messages"][2].update(format_version=7),
            "messages[2].format_version 7 is not one",
        ),
        (
            lambda d: d["messages"][1].update(parent_uuid=str(uuid4())),
            "messages[1].parent_uuid",
        ),
        (lambda d: _set_parent(d, 0, 0), "messages[0] is its own parent"),
        (lambda d: _set_parent(d, 0, 3), "the parents form a cycle"),
        (
            lambda d: d["messages"][3].update(message_uuid=d["messages"][1]["message_uuid"]),
            "messages[3].message_uuid",
        ),
        # The first message said to come last: its children would be made before it.
        (lambda d: d["messages"][0].update(seq=10_000), "messages[1].seq"),
    ],
)
async def test_an_inconsistent_import_is_a_422_that_stores_nothing(
    client: httpx.AsyncClient,
    store: Store,
    make_chat: MakeChat,
    add_message: AddMessage,
    change: Any,
    says: str,
) -> None:
    document = await _exported(client, make_chat, add_message)
    before = await store.get_all_chats()
    change(document)

    response = await client.post("/api/chats/import?thread_id=copy", json=document)

    assert response.status_code == 422, response.text
    assert response.json()["code"] == "invalid_input"
    assert says in response.json()["detail"]
    assert await store.get_all_chats() == before


async def test_an_import_listing_its_messages_out_of_order_keeps_them_all(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage
) -> None:
    document = await _exported(client, make_chat, add_message)
    document["messages"].reverse()

    response = await client.post("/api/chats/import?thread_id=copy", json=document)

    assert response.status_code == 201, response.text
    items = (await client.get(f"/api/chats/{response.json()['chat_uuid']}/messages")).json()
    contents = [m["content"] for m in items["items"]]
    assert contents == ["question 0", "answer 0", "question 1", "answer 1"]


async def test_an_import_may_start_with_a_byte_order_mark(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage
) -> None:
    document = await _exported(client, make_chat, add_message)

    response = await client.post(
        "/api/chats/import?thread_id=copy",
        content=b"\xef\xbb\xbf" + json.dumps(document).encode(),
        headers={"Content-Type": "application/json"},
    )

    assert response.status_code == 201, response.text


# Every backend stores and reads back these (docs/server.md, "Limits").
_FIRST = "0001-01-02T00:00:00Z"
_LAST = "9999-12-30T23:59:59.999999Z"


@pytest.mark.parametrize(
    ("when", "stored"),
    [
        (_FIRST, True),
        (_LAST, True),
        ("2026-05-01T12:00:00+02:00", True),
        ("0001-01-01T00:00:00Z", False),  # PostgreSQL reads it back as -infinity
        ("0001-01-01T23:59:59.999999Z", False),
        ("9999-12-31T00:00:00Z", False),
        ("9999-12-31T23:59:59.999999Z", False),  # PostgreSQL: infinity
        ("0001-01-02T12:00:00+13:00", False),  # the day before in UTC
    ],
)
async def test_an_import_dated_where_a_backend_cannot_read_it_back_is_a_422(
    client: httpx.AsyncClient,
    store: Store,
    make_chat: MakeChat,
    add_message: AddMessage,
    when: str,
    stored: bool,
) -> None:
    document = await _exported(client, make_chat, add_message)
    document["messages"][1]["created_at"] = when
    before = await store.get_all_chats()

    response = await client.post("/api/chats/import?thread_id=copy", json=document)

    if not stored:
        assert response.status_code == 422, response.text
        detail = response.json()["detail"]
        assert "document.messages[1].created_at" in detail
        assert "from 0001-01-02 to 9999-12-30 (UTC)" in detail
        assert await store.get_all_chats() == before
        return
    assert response.status_code == 201, response.text
    chat = response.json()["chat_uuid"]
    answers = [
        await client.get(f"/api/chats/{chat}/{route}") for route in ("messages", "ui", "export")
    ]
    assert [a.status_code for a in answers] == [200, 200, 200]
    read = answers[0].json()["items"][1]["created_at"]
    assert datetime.fromisoformat(read) == datetime.fromisoformat(when)
    connect = await client.get("/agui/threads/copy/connect")
    assert connect.status_code == 200
    assert '"RUN_FINISHED"' in connect.text


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
async def test_an_import_holding_a_number_that_is_not_finite_is_a_422(
    client: httpx.AsyncClient,
    store: Store,
    make_chat: MakeChat,
    add_message: AddMessage,
    literal: str,
) -> None:
    document = await _exported(client, make_chat, add_message)
    document["messages"][0]["metadata"] = {"score": "PLACEHOLDER"}
    body = json.dumps(document).replace('"PLACEHOLDER"', literal)
    before = await store.get_all_chats()

    response = await client.post(
        "/api/chats/import?thread_id=copy",
        content=body,
        headers={"Content-Type": "application/json"},
    )

    assert response.status_code == 422, response.text
    assert "document.messages[0].metadata.score" in response.json()["detail"]
    assert "not a finite number" in response.json()["detail"]
    assert await store.get_all_chats() == before
