"""Branches over HTTP: the page's `branches`, switch, regenerate, edit and fork, per backend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest

from conftest import AddMessage, MakeChat
from server_support import collect_sse
from threadstore import Chat, MessageCreate, Role, Store
from threadstore.server import LOCAL_USER_UUID, create_app


@pytest.fixture
async def client(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an app serving ``store`` (with the demo agent) as the single local user."""
    app = create_app(store, agent="demo", demo_delay=0)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            yield http


async def _chat(make_chat: MakeChat, add_message: AddMessage) -> tuple[Chat, list[Any]]:
    chat = await make_chat(user_uuid=LOCAL_USER_UUID)
    messages = [
        await add_message(chat, "What is 2+2?", role=Role.USER, agui_id="u0"),
        await add_message(chat, "4", role=Role.ASSISTANT, agui_id="a0"),
        await add_message(chat, "And 3+3?", role=Role.USER, agui_id="u1"),
        await add_message(chat, "6", role=Role.ASSISTANT, agui_id="a1"),
    ]
    return chat, messages


async def _page(client: httpx.AsyncClient, chat: Chat) -> dict[str, Any]:
    response = await client.get(f"/api/chats/{chat.chat_uuid}/messages")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _follow(client: httpx.AsyncClient, started: httpx.Response) -> list[str | None]:
    """Wait for the run a 202 names to end; its event types."""
    assert started.status_code == 202, started.text
    run = started.json()
    url = f"/agui/threads/{run['thread_id']}/runs/{run['run_id']}/events"
    async with client.stream("GET", url) as response:
        assert response.status_code == 200
        return [frame.type for frame in await collect_sse(response)]


async def test_regenerate_adds_a_sibling_answer_and_the_page_says_so(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat, (_, _, question, answer) = await _chat(make_chat, add_message)

    events = await _follow(
        client,
        await client.post(
            f"/api/chats/{chat.chat_uuid}/regenerate",
            json={"message_uuid": str(answer.message_uuid)},
        ),
    )

    assert events[-1] == "RUN_FINISHED"
    page = await _page(client, chat)
    contents = [item["content"] for item in page["items"]]
    assert contents[:3] == ["What is 2+2?", "4", "And 3+3?"] and "6" not in contents
    first_new = page["items"][3]
    assert first_new["parent_uuid"] == str(question.message_uuid)
    point = page["branches"][first_new["message_uuid"]]
    assert point == {
        "index": 1,
        "count": 2,
        "siblings": [str(answer.message_uuid), first_new["message_uuid"]],
    }
    # Only messages with siblings are listed.
    assert set(page["branches"]) == {first_new["message_uuid"]}

    switched = await client.post(
        f"/api/chats/{chat.chat_uuid}/switch", json={"message_uuid": str(answer.message_uuid)}
    )
    assert switched.status_code == 200 and switched.json()["active_leaf_uuid"] == str(
        answer.message_uuid
    )
    page = await _page(client, chat)
    assert [item["content"] for item in page["items"]] == ["What is 2+2?", "4", "And 3+3?", "6"]
    assert page["branches"][str(answer.message_uuid)]["index"] == 0


async def test_editing_the_first_message_answers_it_on_a_new_root(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat, (first, *_) = await _chat(make_chat, add_message)

    started = await client.post(
        f"/api/chats/{chat.chat_uuid}/edit",
        json={"message_uuid": str(first.message_uuid), "content": "What is 5+5?"},
    )
    events = await _follow(client, started)

    assert events[-1] == "RUN_FINISHED"
    page = await _page(client, chat)
    head = page["items"][0]
    assert head["content"] == "What is 5+5?" and head["parent_uuid"] is None
    assert head["message_uuid"] == started.json()["message_uuid"]
    assert len(page["items"]) > 1 and "4" not in [i["content"] for i in page["items"]]
    assert page["branches"][head["message_uuid"]]["siblings"] == [
        str(first.message_uuid),
        head["message_uuid"],
    ]


async def test_fork_makes_a_new_chat_with_its_lineage(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat, (_, answer, *_) = await _chat(make_chat, add_message)

    response = await client.post(
        f"/api/chats/{chat.chat_uuid}/fork",
        json={"message_uuid": str(answer.message_uuid), "thread_id": "forked"},
    )

    assert response.status_code == 201, response.text
    fork = response.json()
    assert fork["thread_id"] == "forked"
    assert fork["forked_from_chat_uuid"] == str(chat.chat_uuid)
    assert fork["forked_from_message_uuid"] == str(answer.message_uuid)
    page = await client.get(f"/api/chats/{fork['chat_uuid']}/messages")
    assert [item["content"] for item in page.json()["items"]] == ["What is 2+2?", "4"]
    again = await client.post(
        f"/api/chats/{chat.chat_uuid}/fork",
        json={"message_uuid": str(answer.message_uuid), "thread_id": "forked"},
    )
    assert again.status_code == 409


async def test_branch_routes_answer_json_4xx_for_bad_input(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat, (_, answer, *_) = await _chat(make_chat, add_message)
    _, (other_first, *_) = await _chat(make_chat, add_message)
    base = f"/api/chats/{chat.chat_uuid}"
    cases = [
        ("switch", {"message_uuid": str(other_first.message_uuid)}, 404),
        ("switch", {"message_uuid": "not-a-uuid"}, 422),
        ("regenerate", {}, 422),
        ("regenerate", {"message_uuid": str(uuid4())}, 404),
        ("edit", {"message_uuid": str(answer.message_uuid), "content": "x"}, 422),
        ("edit", {"message_uuid": str(answer.message_uuid), "content": ""}, 422),
        ("fork", {"message_uuid": str(other_first.message_uuid)}, 404),
        ("fork", {"message_uuid": str(answer.message_uuid), "thread_id": " "}, 422),
    ]
    for route, body, code in cases:
        response = await client.post(f"{base}/{route}", json=body)
        assert response.status_code == code, (route, body, response.text)
        assert "detail" in response.json()
    page = await _page(client, chat)
    assert [item["content"] for item in page["items"]] == ["What is 2+2?", "4", "And 3+3?", "6"]


async def test_another_users_chat_is_not_found(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage
) -> None:
    theirs = await make_chat(user_uuid=uuid4())
    message = await add_message(theirs, "hi", role=Role.USER)

    for route in ("switch", "regenerate", "fork"):
        response = await client.post(
            f"/api/chats/{theirs.chat_uuid}/{route}",
            json={"message_uuid": str(message.message_uuid)},
        )
        assert response.status_code == 404, (route, response.text)
    response = await client.post(
        f"/api/chats/{theirs.chat_uuid}/edit",
        json={"message_uuid": str(message.message_uuid), "content": "mine now"},
    )
    assert response.status_code == 404


async def test_the_routes_are_in_the_openapi_document(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]

    for route in ("switch", "regenerate", "edit", "fork"):
        assert "post" in paths[f"/api/chats/{{chat_uuid}}/{route}"]


async def test_export_and_import_over_http_keep_every_branch_and_bytes(
    client: httpx.AsyncClient, store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat, (first, *_) = await _chat(make_chat, add_message)
    await store.chats.update_chat_metadata(chat.chat_uuid, {"icon": b"\x89PNG\x00\xff"})
    await store.branches.edit_message(
        first.message_uuid, MessageCreate(content="Hi", role=Role.USER)
    )

    document = (await client.get(f"/api/chats/{chat.chat_uuid}/export")).json()
    assert document["export_version"] == 3
    assert document["chat"]["metadata"] == {"icon": {"$deuzBytes": "iVBORwD/"}}
    imported = await client.post("/api/chats/import", json=document, params={"thread_id": "copy"})

    assert imported.status_code == 201, imported.text
    copy = await store.chats.get_chat(UUID(imported.json()["chat_uuid"]))
    assert copy is not None and copy.metadata == {"icon": b"\x89PNG\x00\xff"}
    page = await _page(client, copy)
    assert [item["content"] for item in page["items"]] == ["Hi"]
    (versions,) = page["branches"].values()
    await client.post(
        f"/api/chats/{copy.chat_uuid}/switch", json={"message_uuid": versions["siblings"][0]}
    )
    page = await _page(client, copy)
    assert [item["content"] for item in page["items"]] == [
        "What is 2+2?",
        "4",
        "And 3+3?",
        "6",
    ]


async def test_two_regenerates_at_once_each_answer_under_the_turn(
    client: httpx.AsyncClient, store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat, (_, _, question, answer) = await _chat(make_chat, add_message)
    url = f"/api/chats/{chat.chat_uuid}/regenerate"
    body = {"message_uuid": str(answer.message_uuid)}

    started = await asyncio.gather(client.post(url, json=body), client.post(url, json=body))
    # Moving the leaf elsewhere meanwhile does not move the answers either.
    await client.post(f"/api/chats/{chat.chat_uuid}/switch", json=body)
    for response in started:
        assert (await _follow(client, response))[-1] == "RUN_FINISHED"

    tree = await store.branches.get_message_tree(chat.chat_uuid)
    for response in started:
        run = [node for node in tree if node.run_id == response.json()["run_id"]]
        assert run, "the run wrote its answer"
        parents = [node.parent_uuid for node in run]
        assert parents == [question.message_uuid, *(node.message_uuid for node in run[:-1])]
    siblings = await store.branches.get_siblings(chat.chat_uuid, answer.message_uuid)
    assert siblings.count == 3
