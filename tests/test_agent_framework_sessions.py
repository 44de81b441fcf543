"""``ThreadstoreSessionStore`` on every backend, and sessions continued by other processes."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from agent_framework import AgentSession, Message

from af_support import ScriptedChatClient, make_agent, say, texts
from threadstore import ConflictError, Store, open_store
from threadstore.faces.agent_framework import ThreadstoreHistoryProvider, ThreadstoreSessionStore

CHILD = Path(__file__).parent / "af_child.py"


def _session() -> AgentSession:
    session = AgentSession(service_session_id=None)
    session.state["threadstore"] = {"thread_id": "t-1"}
    session.state["memory"] = {"messages": [Message("user", ["kept in state"])]}
    session.state["notes"] = {"count": 2, "tags": ["a", "b"]}
    return session


async def test_a_stored_session_comes_back_whole(store: Store) -> None:
    sessions = ThreadstoreSessionStore(store, uuid4())
    session = _session()

    await sessions.set("key-1", session)
    restored = await sessions.get("key-1")

    assert restored is not None
    assert restored.to_dict() == session.to_dict()
    assert restored.state["memory"]["messages"][0].text == "kept in state"


async def test_set_replaces_and_delete_forgets(store: Store) -> None:
    sessions = ThreadstoreSessionStore(store, uuid4())
    await sessions.set("key-1", AgentSession(session_id="first"))
    await sessions.set("key-1", AgentSession(session_id="second"))

    restored = await sessions.get("key-1")
    assert restored is not None and restored.session_id == "second"

    await sessions.delete("key-1")
    await sessions.delete("never-stored")
    assert await sessions.get("key-1") is None
    assert await sessions.get("never-stored") is None


async def test_a_restored_session_is_a_copy(store: Store) -> None:
    sessions = ThreadstoreSessionStore(store, uuid4())
    await sessions.set("key-1", _session())

    first = await sessions.get("key-1")
    assert first is not None
    first.state["notes"]["count"] = 99

    again = await sessions.get("key-1")
    assert again is not None and again.state["notes"]["count"] == 2


async def test_an_empty_session_key_is_rejected(store: Store) -> None:
    sessions = ThreadstoreSessionStore(store, uuid4())
    with pytest.raises(ValueError, match="non-empty string"):
        await sessions.set("", AgentSession())
    with pytest.raises(ValueError, match="non-empty string"):
        await sessions.get("")


async def test_sessions_are_scoped_by_user_tenant_and_app(store: Store) -> None:
    user = uuid4()
    mine = ThreadstoreSessionStore(store, user, tenant_id="t", app_id="a")
    await mine.set("key-1", AgentSession(session_id="mine"))

    assert (
        await ThreadstoreSessionStore(store, uuid4(), tenant_id="t", app_id="a").get("key-1")
        is None
    )
    other_app = ThreadstoreSessionStore(store, user, tenant_id="t", app_id="b")
    assert await other_app.get("key-1") is None
    await other_app.delete("key-1")
    with pytest.raises(ConflictError):
        await other_app.set("key-1", AgentSession())
    restored = await mine.get("key-1")
    assert restored is not None and restored.session_id == "mine"


async def test_the_session_and_its_history_share_one_chat(store: Store) -> None:
    user = uuid4()
    provider = ThreadstoreHistoryProvider(store, user)
    sessions = ThreadstoreSessionStore(store, user)
    agent = make_agent(ScriptedChatClient([say("Hello.")]), [provider])
    session = agent.create_session()
    await agent.run("Hi", session=session)

    await sessions.set(session.session_id, session)

    chats = await store.get_all_chats(user)
    assert len(chats) == 1
    assert len(await store.get_chat_messages(chats[0].chat_uuid)) == 2


# --- other processes -----------------------------------------------------------------------


DURABLE = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


async def _child(url: str, user: UUID, key: str, turns: int, tag: str) -> list[list[str]]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CHILD),
        url,
        str(user),
        key,
        str(turns),
        tag,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(CHILD.parent)},
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    seen: list[list[str]] = json.loads(out.decode().splitlines()[-1])["seen"]
    return seen


@pytest.mark.parametrize("store_url", DURABLE, indirect=True)
async def test_another_process_continues_a_stored_session(store_url: str) -> None:
    user = uuid4()
    async with await open_store(store_url) as store:
        provider = ThreadstoreHistoryProvider(store, user)
        agent = make_agent(ScriptedChatClient([say("Hello.")]), [provider])
        session = agent.create_session()
        # A storage key of our choosing: the other process can only find the history
        # through the session it restores.
        session.state[provider.source_id] = {"thread_id": f"custom-{uuid4().hex[:6]}"}
        await agent.run("Hi", session=session)
        await ThreadstoreSessionStore(store, user).set("conversation", session)

    seen = await _child(store_url, user, "conversation", 1, "child")

    assert seen == [["user", "Hi"], ["assistant", "Hello."], ["user", "child question 0"]]
    async with await open_store(store_url) as store:
        provider = ThreadstoreHistoryProvider(store, user)
        restored = await ThreadstoreSessionStore(store, user).get("conversation")
        assert restored is not None
        history = await provider.get_messages(None, state=restored.state[provider.source_id])
    assert texts(history) == [
        ("user", "Hi"),
        ("assistant", "Hello."),
        ("user", "child question 0"),
        ("assistant", "child answer 0"),
    ]


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
async def test_two_agent_processes_share_a_session_on_postgres(store_url: str) -> None:
    user, turns = uuid4(), 4

    await asyncio.gather(
        _child(store_url, user, "shared", turns, "a"), _child(store_url, user, "shared", turns, "b")
    )

    async with await open_store(store_url) as store:
        provider = ThreadstoreHistoryProvider(store, user)
        history = texts(await provider.get_messages("shared", state={"thread_id": "shared"}))
    expected: set[tuple[str, str]] = set()
    for tag in "ab":
        for turn in range(turns):
            expected |= {("user", f"{tag} question {turn}"), ("assistant", f"{tag} answer {turn}")}
    assert len(history) == len(expected) == 4 * turns
    assert set(history) == expected
    # Each run's question and answer are stored together, in one transaction.
    for question, answer in zip(history[::2], history[1::2], strict=True):
        assert question[0] == "user" and answer == (
            "assistant",
            question[1].replace("question", "answer"),
        )
