"""docs/chat-store.md runs as written: the auto-persist example and the table adapter."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import UserMessage

from agui_scripts import ScriptedAgent, collect, run_input, user
from postgres_support import POSTGRES_URL_ENV
from test_chat_persist import tool_run
from threadstore.agui import ChatPersistingAgent, ChatPersistOptions
from threadstore.chatstore import ChatRecord, Scope, list_chats

DOC = Path(__file__).resolve().parent.parent / "docs" / "chat-store.md"


def block(language: str, marker: str) -> str:
    """The one ``language`` code block of the page that contains ``marker``."""
    text = DOC.read_text(encoding="utf-8")
    found = [b for b in re.findall(rf"```{language}\n(.*?)```", text, flags=re.S) if marker in b]
    assert len(found) == 1, f"expected one {language} block with {marker!r}, found {len(found)}"
    return found[0]


def test_the_auto_persist_example_runs_and_its_assertions_hold() -> None:
    exec(compile(block("python", "class Echo"), str(DOC), "exec"), {"__name__": "example"})


@pytest.mark.postgres
async def test_the_table_adapter_persists_a_run_on_postgresql() -> None:
    import asyncpg

    url = os.environ.get(POSTGRES_URL_ENV)
    if not url:
        pytest.skip(f"{POSTGRES_URL_ENV} is not set; this test needs a PostgreSQL server")
    table = f"chats_{uuid.uuid4().hex[:12]}"
    create = block("sql", "create table chats")
    assert "create table chats (" in create
    namespace: dict[str, Any] = {}
    exec(compile(block("python", "class TableChatStore"), str(DOC), "exec"), namespace)

    pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
    try:
        await pool.execute(create.replace("create table chats (", f"create table {table} ("))
        chats = namespace["TableChatStore"](pool, table)
        scope = Scope(user_id="u_1", tenant_id="acme")
        photo = UserMessage(
            id="u1", content="Weather here?", metadata={"photo": b"\x89PNG\r\n\x00"}
        )
        agent = ChatPersistingAgent(
            ScriptedAgent(tool_run()), ChatPersistOptions(chats, "chat-42", scope)
        )

        await collect(agent.run(run_input(messages=[photo])))

        loaded = await chats.load_chat("chat-42")
        assert isinstance(loaded, ChatRecord) and loaded.scope == scope
        assert [(m.role, m.id) for m in loaded.messages] == [
            ("user", "u1"),
            ("assistant", "a1"),
            ("tool", "call-1-result"),
            ("assistant", "a1-assistant-2"),
        ]
        assert loaded.messages[0].metadata == {"photo": b"\x89PNG\r\n\x00"}
        assert await chats.load_chat("never-saved") is None

        # A second run saves the longer history over the same row.
        more = run_input(run_id="run-2", messages=[*loaded.messages, user("u2", "Thanks")])
        await collect(
            ChatPersistingAgent(ScriptedAgent(tool_run("run-2")), agent.options).run(more)
        )
        rows = await pool.fetch(f"SELECT chat_id, scope->>'tenant_id' AS tenant FROM {table}")
        assert [(row["chat_id"], row["tenant"]) for row in rows] == [("chat-42", "acme")]
        again = await chats.load_chat("chat-42")
        assert again is not None and again.messages[: len(loaded.messages)] == loaded.messages
        assert [m.role for m in again.messages[len(loaded.messages) :]] == [
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        with pytest.raises(TypeError, match="has no list_chats method"):
            await list_chats(chats)
    finally:
        await pool.execute(f"DROP TABLE IF EXISTS {table}")
        await pool.close()
