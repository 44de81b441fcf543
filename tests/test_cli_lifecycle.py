"""The command line's lifecycle commands: chats compact / uncompact, on a real SQLite file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cli_support import invoke
from threadstore import ChatCreate, MessageCreate, MessageStatus, Role, open_store
from threadstore.server import user_uuid_for


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'threadstore.db'}"


async def _seed(db: str, turns: int, user: str = "local", thread: str = "t1") -> str:
    async with await open_store(db) as store:
        chat = await store.create_chat(ChatCreate(user_uuid=user_uuid_for(user), thread_id=thread))
        done = {"status": MessageStatus.COMPLETE, "in_progress": False}
        for n in range(turns):
            for role, text in ((Role.USER, f"question {n}"), (Role.ASSISTANT, f"answer {n}")):
                await store.create_message(
                    MessageCreate(chat_uuid=chat.chat_uuid, role=role, content=text, **done)
                )
        return str(chat.chat_uuid)


def summarize_briefly(messages: object, previous: object) -> str:
    """A summarizer for ``--summarizer tests.test_cli_lifecycle:summarize_briefly``."""
    return "they talked"


def test_compact_then_show_then_uncompact(db: str) -> None:
    chat = asyncio.run(_seed(db, 5))

    code, compacted = invoke("chats", "compact", chat, "--db", db, "--keep", "2")
    _, shown = invoke("chats", "show", chat, "--db", db)
    code_again, again = invoke("chats", "compact", chat, "--db", db, "--keep", "2")
    undone_code, undone = invoke("chats", "uncompact", chat, "--db", db)
    missing_code, missing = invoke("chats", "uncompact", chat, "--db", db)

    assert code == 0 and "instead of 8 message(s)" in compacted
    assert "threadstore chats uncompact" in compacted
    # Every message is still shown, and the summary where it applies.
    assert all(f"question {n}" in shown for n in range(5))
    assert shown.index("answer 3") < shown.index("── summary") < shown.index("question 4")
    assert code_again == 0 and "nothing to compact" in again
    assert undone_code == 0 and "removed summary" in undone
    assert missing_code == 1 and missing.startswith("error: chat") and "no summary" in missing


def test_compact_with_a_summarizer_of_ones_own_and_a_bad_one(db: str) -> None:
    chat = asyncio.run(_seed(db, 3))

    code, output = invoke(
        "chats", "compact", chat, "--db", db, "--keep", "0",
        "--summarizer", "test_cli_lifecycle:summarize_briefly",
    )  # fmt: skip
    bad_code, bad = invoke("chats", "compact", chat, "--db", db, "--summarizer", "nowhere")
    _, shown = invoke("chats", "show", chat, "--db", db)

    assert code == 0, output
    assert "they talked" in shown
    assert bad_code == 1 and bad.startswith("error: --summarizer 'nowhere' is not module:attribute")
