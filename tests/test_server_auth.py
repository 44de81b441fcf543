"""Users and isolation: nobody reaches another user's chats, messages or runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from uuid import UUID

import httpx
import pytest

from server_support import GatedAgent, LiveServer, collect_sse, read_sse, run_input
from threadstore import open_store
from threadstore.errors import ConfigurationError
from threadstore.server import (
    LOCAL_USER_UUID,
    USER_NAMESPACE,
    DemoAgent,
    HeaderAuth,
    TokenAuth,
    create_app,
    user_uuid_for,
)
from threadstore.server._auth import parse_token_pairs

ALICE = {"Authorization": "Bearer token-alice"}
BOB = {"Authorization": "Bearer token-bob"}
NOBODY: dict[str, str] = {}
WRONG = {"Authorization": "Bearer not-a-token"}


@pytest.fixture
async def tokens_server(tmp_path: Path) -> AsyncIterator[tuple[LiveServer, GatedAgent]]:
    """A live server with token auth for alice and bob, serving a gated agent."""
    agent = GatedAgent()
    auth = TokenAuth({"token-alice": "alice", "token-bob": "bob"})
    app = create_app(f"sqlite:///{tmp_path / 'threadstore.db'}", agent=agent, auth=auth)
    async with LiveServer(app) as server:
        try:
            yield server, agent
        finally:
            agent.gate.set()


async def test_no_route_gives_another_user_or_nobody_anything(
    tokens_server: tuple[LiveServer, GatedAgent],
) -> None:
    server, agent = tokens_server
    body = run_input("alice's secret question")
    thread, run = body["threadId"], body["runId"]
    async with httpx.AsyncClient(base_url=server.url) as client:
        async with client.stream("POST", "/agui", json=body, headers=ALICE) as alice_run:
            async for frame in read_sse(alice_run):
                if frame.type == "TEXT_MESSAGE_CONTENT":
                    break  # alice's run is now live and waiting at the gate
        chat = (await client.get("/api/chats", headers=ALICE)).json()["items"][0]
        chat_id = chat["chat_uuid"]
        exported = (await client.get(f"/api/chats/{chat_id}/export", headers=ALICE)).json()
        routes = [
            ("GET", f"/api/chats/{chat_id}", None),
            ("GET", f"/api/chats/{chat_id}/messages", None),
            ("GET", f"/api/chats/{chat_id}/export", None),
            ("PATCH", f"/api/chats/{chat_id}", {"name": "pwned"}),
            ("DELETE", f"/api/chats/{chat_id}", None),
            ("GET", f"/agui/threads/{thread}/runs/{run}/events", None),
            ("POST", f"/agui/threads/{thread}/runs/{run}/cancel", None),
            ("GET", f"/agui/threads/{thread}/connect", None),
        ]
        answers: dict[tuple[str, str], list[int]] = {}
        leaked: list[str] = []
        alice_uuid = str(user_uuid_for("alice"))
        for who, headers in (("bob", BOB), ("nobody", NOBODY), ("wrong", WRONG)):
            for method, path, payload in routes:
                response = await client.request(method, path, json=payload, headers=headers)
                answers.setdefault((who, method), []).append(response.status_code)
                if "secret" in response.text or alice_uuid in response.text:
                    leaked.append(f"{who} {method} {path}")
            listing = await client.get("/api/chats", headers=headers)
            answers.setdefault((who, "list"), []).append(listing.status_code)
            if chat_id in listing.text:
                leaked.append(f"{who} list")
            imported = await client.post("/api/chats/import", json=exported, headers=headers)
            answers.setdefault((who, "import"), []).append(imported.status_code)
        bob_chats = (await client.get("/api/chats", headers=BOB)).json()["items"]

        agent.gate.set()
        events = f"/agui/threads/{thread}/runs/{run}/events"
        async with client.stream("GET", events, params={"after": 0}, headers=ALICE) as rest:
            alice_frames = await collect_sse(rest)
        alice_chat = (await client.get(f"/api/chats/{chat_id}", headers=ALICE)).json()

    assert leaked == []
    assert set(answers[("bob", "GET")]) == {404}
    assert set(answers[("bob", "PATCH")]) == {404}
    assert set(answers[("bob", "DELETE")]) == {404}
    assert set(answers[("bob", "POST")]) == {404}
    assert answers[("bob", "list")] == [200]
    for who in ("nobody", "wrong"):
        statuses = {s for (w, _), codes in answers.items() if w == who for s in codes}
        assert statuses == {401}, who
    # bob's import made bob his own copy; alice's chat, name and live run were untouched
    assert [c["user_uuid"] for c in bob_chats] == [str(user_uuid_for("bob"))]
    assert alice_chat["name"] == "alice's secret question"  # named by her first message only
    assert alice_frames[-1].type == "RUN_FINISHED"


async def test_a_run_on_another_users_thread_id_gets_its_own_chat(
    tokens_server: tuple[LiveServer, GatedAgent],
) -> None:
    server, agent = tokens_server
    agent.gate.set()
    alice_body = run_input("alice speaks", thread_id="shared-name")
    bob_body = run_input("bob speaks", thread_id="shared-name")
    async with httpx.AsyncClient(base_url=server.url) as client:
        for body, headers in ((alice_body, ALICE), (bob_body, BOB)):
            async with client.stream("POST", "/agui", json=body, headers=headers) as response:
                await collect_sse(response)
        histories = {}
        for who, headers in (("alice", ALICE), ("bob", BOB)):
            chats = (await client.get("/api/chats", headers=headers)).json()["items"]
            url = f"/api/chats/{chats[0]['chat_uuid']}/messages"
            items = (await client.get(url, headers=headers)).json()["items"]
            histories[who] = [m["content"] for m in items]

    assert histories["alice"][0] == "alice speaks"
    assert histories["bob"][0] == "bob speaks"
    assert "alice speaks" not in histories["bob"]


async def test_a_trusted_header_names_the_user(tmp_path: Path) -> None:
    store = await open_store("memory://")
    app = create_app(store, agent=DemoAgent(delay=0), auth=HeaderAuth("X-User-Id"))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            run = await client.post(
                "/agui", json=run_input("hi", thread_id="t1"), headers={"X-User-Id": "carol"}
            )
            mine = await client.get("/api/chats", headers={"X-User-Id": "carol"})
            theirs = await client.get("/api/chats", headers={"X-User-Id": "dave"})
            missing = await client.get("/api/chats")
    await store.close()

    assert run.status_code == 200
    assert [c["thread_id"] for c in mine.json()["items"]] == ["t1"]
    assert mine.json()["items"][0]["user_uuid"] == str(user_uuid_for("carol"))
    assert theirs.json()["items"] == []
    assert missing.status_code == 401
    assert "X-User-Id" in missing.json()["detail"]


def test_user_ids_map_to_stable_uuids() -> None:
    a_uuid = "2f1b8e1c-0c1e-4a55-9a43-5f7e3f1c2b10"

    assert user_uuid_for(a_uuid) == UUID(a_uuid)
    assert user_uuid_for("alice") == user_uuid_for("alice") != user_uuid_for("bob")
    assert user_uuid_for("alice").version == 5
    assert user_uuid_for("local") == LOCAL_USER_UUID
    assert str(USER_NAMESPACE) == "6f1c3a52-8a0e-5c5e-9d1f-7b2f0c4e6a11"


def test_tokens_come_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens"
    path.write_text("# comment\n\ntok-1 = alice\ntok-2=bob\n", encoding="utf-8")
    monkeypatch.setenv("THREADSTORE_TOKENS", "tok-3=carol,tok-4=dave")

    assert TokenAuth.from_file(path).tokens == {"tok-1": "alice", "tok-2": "bob"}
    assert TokenAuth.from_env().tokens == {"tok-3": "carol", "tok-4": "dave"}
    with pytest.raises(ConfigurationError, match="line 1"):
        parse_token_pairs("no-equals-sign")
    with pytest.raises(ConfigurationError, match="at least one"):
        TokenAuth({})


async def test_two_users_run_the_same_thread_and_run_ids_at_once(
    tokens_server: tuple[LiveServer, GatedAgent],
) -> None:
    server, agent = tokens_server
    bodies = {
        "alice": (run_input("alice asks", thread_id="t1", run_id="r1"), ALICE),
        "bob": (run_input("bob asks", thread_id="t1", run_id="r1"), BOB),
    }
    path = "/agui/threads/t1/runs/r1"
    async with httpx.AsyncClient(base_url=server.url) as client:
        for body, headers in bodies.values():
            async with client.stream("POST", "/agui", json=body, headers=headers) as response:
                assert response.status_code == 200
                async for frame in read_sse(response):
                    if frame.type == "TEXT_MESSAGE_CONTENT":
                        break  # both runs are now live, waiting at the gate
        cancel = await client.post(f"{path}/cancel", headers=BOB)
        agent.gate.set()
        streams = {}
        for who, (_, headers) in bodies.items():
            async with client.stream("GET", f"{path}/events", headers=headers) as response:
                streams[who] = await collect_sse(response)
        histories = {}
        for who, (_, headers) in bodies.items():
            chat = (await client.get("/api/chats", headers=headers)).json()["items"][0]
            url = f"/api/chats/{chat['chat_uuid']}/messages"
            histories[who] = [
                (m["content"], m["status"])
                for m in (await client.get(url, headers=headers)).json()["items"]
            ]

    assert cancel.json()["cancelled"] is True
    assert streams["alice"][-1].type == "RUN_FINISHED"
    assert streams["bob"][-1].type == "RUN_ERROR"
    assert histories == {
        "alice": [("alice asks", "complete"), ("first half second half", "complete")],
        "bob": [("bob asks", "complete"), ("first half ", "interrupted")],
    }
