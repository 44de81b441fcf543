"""``GET /api/search``: the caller's messages only, on every backend, through the ASGI app."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from conftest import AddMessage, MakeChat
from threadstore import Role, Store
from threadstore.server import TokenAuth, create_app, user_uuid_for

ALICE = {"Authorization": "Bearer token-alice"}
BOB = {"Authorization": "Bearer token-bob"}


@pytest.fixture
async def client(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an app serving ``store`` to alice and bob."""
    auth = TokenAuth({"token-alice": "alice", "token-bob": "bob"})
    app = create_app(store, agent="demo", demo_delay=0, auth=auth)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            yield http


async def test_search_answers_the_callers_hits_with_snippets_and_pages(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage
) -> None:
    alice = user_uuid_for("alice")
    chat = await make_chat(user_uuid=alice, name="Trip")
    made = [
        await add_message(chat, f"packing list for the mountain trip, day {n}", role=Role.USER)
        for n in range(3)
    ]

    response = await client.get(
        "/api/search", params={"q": "Mountain trip", "limit": 2}, headers=ALICE
    )
    assert response.status_code == 200
    body = response.json()
    first = body["items"][0]
    assert first["message_uuid"] == str(made[-1].message_uuid)
    assert (first["chat_uuid"], first["chat_name"], first["kind"]) == (
        str(chat.chat_uuid),
        "Trip",
        "text",
    )
    marked = [first["snippet"][start:end].lower() for start, end in first["highlights"]]
    assert marked == ["mountain", "trip"]
    more = await client.get(
        "/api/search", params={"q": "mountain trip", "cursor": body["next_cursor"]}, headers=ALICE
    )
    assert [hit["message_uuid"] for hit in body["items"] + more.json()["items"]] == [
        str(m.message_uuid) for m in reversed(made)
    ]
    assert more.json()["next_cursor"] is None


async def test_no_query_returns_another_users_message(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage
) -> None:
    alice, bob = user_uuid_for("alice"), user_uuid_for("bob")
    hers = await make_chat(user_uuid=alice)
    his = await make_chat(user_uuid=bob)
    await add_message(hers, "alice's secret recipe for plum jam", role=Role.USER)
    await add_message(his, "bob's secret recipe for plum jam", role=Role.USER)
    await add_message(his, f"u{alice.hex} plum", role=Role.USER)

    for q in ("secret", "plum jam", "recipe secret", f"u{alice.hex}", "alice", "bob"):
        for order in ("newest", "best"):
            for all_branches in ("false", "true"):
                params = {"q": q, "order": order, "all_branches": all_branches}
                for who, mine in ((ALICE, hers), (BOB, his)):
                    response = await client.get("/api/search", params=params, headers=who)
                    assert response.status_code == 200
                    chats = {hit["chat_uuid"] for hit in response.json()["items"]}
                    assert chats <= {str(mine.chat_uuid)}, (q, who)
    nobody = await client.get("/api/search", params={"q": "secret"})
    assert nobody.status_code == 401


@pytest.mark.parametrize(
    ("params", "names"),
    [
        ({}, "q"),
        ({"q": "!!!"}, "word"),
        ({"q": "x" * 501}, "500"),
        ({"q": "ok", "limit": 0}, "limit"),
        ({"q": "ok", "limit": 101}, "limit"),
        ({"q": "ok", "order": "oldest"}, "order"),
        ({"q": "ok", "cursor": "nonsense"}, "cursor"),
        ({"q": 'a" OR NEAR(b'}, None),
    ],
)
async def test_a_bad_query_is_a_clear_422_and_no_query_is_a_500(
    client: httpx.AsyncClient, params: dict[str, object], names: str | None
) -> None:
    response = await client.get("/api/search", params=params, headers=ALICE)
    if names is None:
        assert response.status_code == 200
        return
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/json")
    assert names in response.text
