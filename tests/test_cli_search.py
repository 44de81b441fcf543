"""``threadstore search``: one user's messages by their words, in-process (typer's runner)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from cli_support import invoke
from threadstore import ChatCreate, MessageCreate, MessageToolCallCreate, Role, open_store
from threadstore.server import LOCAL_USER_UUID, user_uuid_for


async def _seed(db: str) -> None:
    async with await open_store(db) as store:
        for user, text in ((LOCAL_USER_UUID, "mine"), (user_uuid_for("bob"), "bob's")):
            chat = await store.create_chat(
                ChatCreate(user_uuid=user, thread_id="t", name=f"{text} maths")
            )
            reply = await store.create_message(
                MessageCreate(chat_uuid=chat.chat_uuid, role=Role.ASSISTANT, content=f"{text} sum")
            )
            await store.create_message_tool_call(
                MessageToolCallCreate(
                    message_uuid=reply.message_uuid,
                    tool_call_id="c1",
                    name="calculator",
                    arguments='{"expression": "2+2"}',
                )
            )


def test_search_prints_the_users_hits_and_only_theirs(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'threadstore.db'}"
    asyncio.run(_seed(db))

    code, output = invoke("search", "calculator", "--db", db)
    assert code == 0, output
    assert "mine maths" in output and "tool" in output and "bob" not in output

    code, output = invoke("search", "calculator expression", "--db", db, "--user", "bob", "--json")
    assert code == 0, output
    (hit,) = json.loads(output)["items"]
    assert (hit["chat_name"], hit["kind"]) == ("bob's maths", "tool")

    code, output = invoke("search", "nothing", "--db", db)
    assert (code, output.strip()) == (0, "no message has those words")
    code, output = invoke("search", "!!!", "--db", db)
    assert code != 0 and "word" in output
