"""The server's edge, over real HTTP: identity headers, CORS, content types, hostile ids."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import BaseEvent, RunAgentInput

from server_support import LiveServer, collect_sse, run_input, served_with_store
from threadstore import Store, open_store
from threadstore.server import DemoAgent, HeaderAuth, TokenAuth, create_app


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[Store]:
    store = await open_store(f"sqlite:///{tmp_path / 'threadstore.db'}")
    try:
        yield store
    finally:
        await store.close()


async def test_a_repeated_identity_header_is_refused(sqlite_store: Store) -> None:
    app = create_app(sqlite_store, agent=DemoAgent(delay=0), auth=HeaderAuth("X-User-Id"))
    async with LiveServer(app) as server, httpx.AsyncClient(base_url=server.url) as client:
        # A proxy that appends its header after the client's own copy.
        twice = await client.get(
            "/api/chats", headers=[("X-User-Id", "mallory"), ("X-User-Id", "alice")]
        )
        run = await client.post(
            "/agui",
            json=run_input("hi"),
            headers=[("X-User-Id", "mallory"), ("X-User-Id", "alice")],
        )
        once = await client.get("/api/chats", headers={"X-User-Id": "alice"})

    assert twice.status_code == 401
    assert "X-User-Id header appears 2 times" in twice.json()["detail"]
    assert run.status_code == 401
    assert once.status_code == 200
    assert await sqlite_store.get_all_chats() == []


async def test_a_repeated_authorization_header_is_refused(sqlite_store: Store) -> None:
    auth = TokenAuth({"token-alice": "alice", "token-bob": "bob"})
    app = create_app(sqlite_store, agent=DemoAgent(delay=0), auth=auth)
    twice = [("Authorization", "Bearer token-alice"), ("Authorization", "Bearer token-bob")]
    async with LiveServer(app) as server, httpx.AsyncClient(base_url=server.url) as client:
        listed = await client.get("/api/chats", headers=twice)
        run = await client.post("/agui", json=run_input("hi"), headers=twice)
        once = await client.get("/api/chats", headers={"Authorization": "Bearer token-bob"})

    assert listed.status_code == 401
    assert "Authorization header appears 2 times" in listed.json()["detail"]
    assert run.status_code == 401
    assert once.status_code == 200
    assert await sqlite_store.get_all_chats() == []


async def test_cors_is_off_by_default_and_allows_the_configured_origins(
    sqlite_store: Store,
) -> None:
    preflight = {
        "Origin": "https://app.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    closed = create_app(sqlite_store, agent=DemoAgent(delay=0))
    async with LiveServer(closed) as server, httpx.AsyncClient(base_url=server.url) as client:
        off = await client.options("/agui", headers=preflight)
    opened = create_app(
        sqlite_store, agent=DemoAgent(delay=0), cors_origins=["https://app.example"]
    )
    async with LiveServer(opened) as server, httpx.AsyncClient(base_url=server.url) as client:
        allowed = await client.options("/agui", headers=preflight)
        other = await client.options("/agui", headers={**preflight, "Origin": "https://evil"})
        listed = await client.get("/api/chats", headers={"Origin": "https://app.example"})

    assert off.status_code == 405
    assert "access-control-allow-origin" not in off.headers
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "https://app.example"
    assert "POST" in allowed.headers["access-control-allow-methods"]
    assert other.status_code == 400
    assert "access-control-allow-origin" not in other.headers
    assert listed.headers["access-control-allow-origin"] == "https://app.example"


# --- hostile input on SQLite and PostgreSQL: a JSON 4xx, nothing stored ----------------------


class EdgeAgent:
    """The demo agent, except that a user message saying ``raise`` makes it raise."""

    def __init__(self) -> None:
        self.demo = DemoAgent(delay=0)

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Raise on ``raise`` before producing anything; else run the demo."""
        if input.messages and input.messages[-1].content == "raise":
            raise KeyError("secret internal detail")
        async for event in self.demo.run(input):
            yield event


@dataclass
class Edge:
    client: httpx.AsyncClient
    store: Store

    async def post(self, path: str, body: Any, **kwargs: Any) -> httpx.Response:
        """POST ``body`` as ASCII JSON, so lone surrogates travel as ``\\ud800`` escapes."""
        headers = {"Content-Type": "application/json", **kwargs.pop("headers", {})}
        return await self.client.post(path, content=json.dumps(body), headers=headers, **kwargs)

    async def stored(self) -> list[tuple[str, list[str]]]:
        """Every chat (any user) with its messages' contents."""
        store = self.store
        return [
            (chat.thread_id, [m.content for m in await store.get_chat_messages(chat.chat_uuid)])
            for chat in await store.get_all_chats()
        ]


@pytest.fixture
async def edge(server_db_url: str) -> AsyncIterator[Edge]:
    """A real server on the database, and a store of its own to look at what got stored."""
    async with served_with_store(server_db_url, EdgeAgent()) as served:
        yield Edge(*served)


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("content", "hi \ud800 there", "messages[0].content contains a lone surrogate"),
        ("content", "hi \x00 there", "messages[0].content contains a NUL character"),
        ("message_id", "m-\udfff", "messages[0].id contains a lone surrogate"),
        ("message_id", "m-\x00", "messages[0].id contains a NUL"),
        ("threadId", "t-\ud800", "threadId contains a lone surrogate"),
        ("threadId", "t-\x00", "threadId contains a NUL"),
        ("runId", "r-\udbff", "runId contains a lone surrogate"),
        ("runId", "r-\x00", "runId contains a NUL"),
        ("state", {"k\x00": 1}, "state key contains a NUL"),
        ("state", {"k": ["\ud800"]}, "state.k[0] contains a lone surrogate"),
        ("state", _nested(600), "state is nested more than 64 levels deep"),
        ("state", _nested(65), "state is nested more than 64 levels deep"),
        ("forwardedProps", _nested(200), "forwardedProps is nested more than 64 levels"),
    ],
)
async def test_unstorable_text_and_deep_json_are_a_422_that_stores_nothing(
    edge: Edge, field: str, value: Any, says: str
) -> None:
    body = run_input("hello")
    if field == "content":
        body["messages"][0]["content"] = value
    elif field == "message_id":
        body["messages"][0]["id"] = value
    else:
        body[field] = value

    response = await edge.post("/agui", body)

    assert response.status_code == 422, response.text
    assert response.json()["code"] == "invalid_input"
    assert says in response.json()["detail"]
    assert await edge.stored() == []


@pytest.mark.parametrize(
    ("field", "literal", "says"),
    [
        ("state", '{"x": NaN}', "state.x is nan"),
        ("state", '{"x": [1, -Infinity]}', "state.x[1] is -inf"),
        ("state", '{"x": {"y": 1e400}}', "state.x.y is inf"),
        ("forwardedProps", '{"temperature": Infinity}', "forwardedProps.temperature is inf"),
        ("tools", '[{"name": "t", "description": "d", "parameters": {"max": NaN}}]', "tools"),
        ("context", '[{"description": "d", "value": "v", "weight": NaN}]', "context"),
        ("newField", "NaN", "newField is nan"),
    ],
)
async def test_a_number_that_is_not_finite_is_a_422_naming_its_field(
    edge: Edge, field: str, literal: str, says: str
) -> None:
    # Python's JSON writer would refuse these: the body is written by hand, as a client
    # whose JSON writer lets them through sends it.
    body = json.dumps(run_input("hello"))[:-1] + f', "{field}": {literal}}}'

    response = await edge.client.post(
        "/agui", content=body, headers={"Content-Type": "application/json"}
    )

    assert response.status_code == 422, response.text
    assert response.json()["code"] == "invalid_input"
    assert says in response.json()["detail"]
    assert "not a finite number" in response.json()["detail"]
    assert await edge.stored() == []


@pytest.mark.parametrize("depth", [1_000, 5_000, 100_000])
async def test_json_too_deep_to_parse_is_a_422_giving_the_limit(edge: Edge, depth: int) -> None:
    body = json.dumps(run_input("hello"))[:-1] + ', "state": ' + "[" * depth + "]" * depth + "}"

    run = await edge.client.post(
        "/agui", content=body, headers={"Content-Type": "application/json"}
    )
    imported = await edge.client.post(
        "/api/chats/import",
        content="[" * depth + "]" * depth,
        headers={"Content-Type": "application/json"},
    )

    for response in (run, imported):
        assert response.status_code == 422, response.text
        assert response.json() == {
            "detail": "request body is nested too deeply: objects and arrays may nest at most "
            "64 levels",
            "code": "invalid_input",
        }
    assert await edge.stored() == []


async def test_a_field_this_version_does_not_know_is_ignored(edge: Edge) -> None:
    # A newer AG-UI client may send fields this server's AG-UI version has not heard of.
    body = {**run_input("hello"), "newField": {"a": [1, 2]}, "anotherOne": "x"}

    response = await edge.post("/agui", body)

    assert response.status_code == 200
    assert [e.type for e in await collect_sse(response)][-1] == "RUN_FINISHED"
    [(_, contents)] = await edge.stored()
    assert contents[0] == "hello"


async def test_state_within_the_depth_limit_is_stored(edge: Edge) -> None:
    body = {**run_input("hello"), "state": _nested(60)}

    response = await edge.post("/agui", body)

    assert response.status_code == 200
    assert [e.type for e in await collect_sse(response)][-1] == "RUN_FINISHED"
    [(_, contents)] = await edge.stored()
    assert contents[0] == "hello"


async def test_message_cursors_beyond_64_bits_are_a_422(edge: Edge) -> None:
    response = await edge.post("/agui", run_input("hello"))
    assert response.status_code == 200
    chat = (await edge.store.get_all_chats())[0]
    url = f"/api/chats/{chat.chat_uuid}/messages"

    answers = {
        query: await edge.client.get(url, params=params)
        for query, params in {
            "after 2^63": {"after": 2**63},
            "before 2^64": {"before": 2**64},
            "after max": {"after": 2**63 - 1},
            "before max": {"before": 2**63 - 1},
        }.items()
    }
    resume = await edge.client.get(
        f"/agui/threads/{chat.thread_id}/runs/x/events", headers={"Last-Event-ID": str(2**70)}
    )

    assert {q: a.status_code for q, a in answers.items()} == {
        "after 2^63": 422,
        "before 2^64": 422,
        "after max": 200,
        "before max": 200,
    }
    assert "after" in answers["after 2^63"].json()["detail"]
    assert answers["before max"].json()["items"][0]["content"] == "hello"
    assert resume.status_code == 422
    assert "Last-Event-ID" in resume.json()["detail"]


async def test_unstorable_ids_in_paths_names_and_imports_are_a_422(edge: Edge) -> None:
    response = await edge.post("/agui", run_input("hello", thread_id="t1"))
    assert response.status_code == 200
    chat = (await edge.store.get_all_chats())[0]
    exported = (await edge.client.get(f"/api/chats/{chat.chat_uuid}/export")).json()
    before = await edge.stored()
    hostile = {**exported, "chat": {**exported["chat"], "state": {"x": "nul \x00 here"}}}

    cancel = await edge.client.post("/agui/threads/t%00/runs/r1/cancel")
    resume = await edge.client.get("/agui/threads/t1/runs/r%00/events")
    rename = await edge.client.patch(f"/api/chats/{chat.chat_uuid}", json={"name": "a\x00b"})
    long_name = await edge.client.patch(f"/api/chats/{chat.chat_uuid}", json={"name": "n" * 201})
    imported = await edge.post("/api/chats/import?thread_id=t2", hostile)
    renamed_import = await edge.post(
        "/api/chats/import?thread_id=t3",
        {**exported, "chat": {**exported["chat"], "name": "n" * 201}},
    )

    assert [cancel.status_code, resume.status_code] == [422, 422]
    assert "NUL" in cancel.json()["detail"] and "NUL" in resume.json()["detail"]
    assert rename.status_code == 422 and "NUL" in rename.json()["detail"]
    assert long_name.status_code == 422 and "limit is 200" in long_name.json()["detail"]
    assert imported.status_code == 422
    assert "document.chat.state.x contains a NUL" in imported.json()["detail"]
    assert renamed_import.status_code == 422
    assert "limit is 200" in renamed_import.json()["detail"]
    assert await edge.stored() == before


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain", b'{"threadId": "t"}'),
        ("application/x-www-form-urlencoded", b"threadId=t&runId=r"),
        ("multipart/form-data; boundary=x", b"--x--"),
    ],
)
async def test_a_body_that_is_not_json_is_a_415(edge: Edge, content_type: str, body: bytes) -> None:
    headers = {"Content-Type": content_type}

    run = await edge.client.post("/agui", content=body, headers=headers)
    imported = await edge.client.post("/api/chats/import", content=body, headers=headers)

    for response in (run, imported):
        assert response.status_code == 415
        assert response.json()["code"] == "unsupported_media_type"
        assert "must be JSON" in response.json()["detail"]
    assert await edge.stored() == []


async def test_an_agent_that_raises_ends_its_stream_without_python_text(edge: Edge) -> None:
    response = await edge.post("/agui", run_input("raise"))

    events = [frame.data for frame in await collect_sse(response) if frame.data]
    assert response.status_code == 200
    assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1]["code"] == "INTERNAL_ERROR"
    assert "secret" not in events[-1]["message"]
    assert "KeyError" not in events[-1]["message"]


async def test_a_body_that_is_not_utf8_is_a_400_saying_so(edge: Edge) -> None:
    response = await edge.client.post(
        "/agui", content=b'{"threadId": "\xff\xfe"}', headers={"Content-Type": "application/json"}
    )

    assert response.status_code == 400
    assert response.json()["code"] == "bad_json"
    assert "UTF-8 JSON" in response.json()["detail"]
