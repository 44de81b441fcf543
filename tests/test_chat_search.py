"""Finding chats by name: the store on every backend, the HTTP API and the CLI."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import uuid4

import httpx
import pytest
from typer.testing import CliRunner

from conftest import MakeChat
from server_support import demo_client
from threadstore import ChatCreate, Store, open_store
from threadstore.cli import app
from threadstore.server import LOCAL_USER_UUID, user_uuid_for


async def test_listing_keeps_chats_whose_name_contains_the_text_in_any_case(
    store: Store, make_chat: MakeChat
) -> None:
    user = uuid4()
    budget = await make_chat(user_uuid=user, name="Budget 2025")
    review = await make_chat(user_uuid=user, name="the BUDGET review")
    await make_chat(user_uuid=user, name="Holiday plans")
    await make_chat(user_uuid=user)  # no name: never a match
    await make_chat(user_uuid=uuid4(), name="someone else's budget")

    page = await store.chats.list_chats(user, name_contains="budget")
    everyone = await store.get_all_chats(name_contains="bUdGeT")

    assert [c.chat_uuid for c in page.items] == [review.chat_uuid, budget.chat_uuid]
    assert len(everyone) == 3
    assert len((await store.chats.list_chats(user, name_contains="")).items) == 4


async def test_percent_and_underscore_in_the_search_are_plain_characters(
    store: Store, make_chat: MakeChat
) -> None:
    user = uuid4()
    exact = await make_chat(user_uuid=user, name="100% done_ok \\ back")
    await make_chat(user_uuid=user, name="100 percent doneXok")

    for text in ("100%", "done_ok", "0% d", "\\ back", "%", "_"):
        page = await store.chats.list_chats(user, name_contains=text)
        assert [c.chat_uuid for c in page.items] == [exact.chat_uuid], text


async def test_a_search_pages_with_the_cursor(store: Store, make_chat: MakeChat) -> None:
    user = uuid4()
    made = [await make_chat(user_uuid=user, name=f"report {i}") for i in range(5)]
    await make_chat(user_uuid=user, name="other")

    seen = []
    cursor = None
    while True:
        page = await store.chats.list_chats(user, limit=2, cursor=cursor, name_contains="REPORT")
        seen += [c.chat_uuid for c in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break

    assert seen == [c.chat_uuid for c in reversed(made)]


@pytest.fixture
async def client(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an app serving ``store`` as the single local user."""
    async with demo_client(store) as http:
        yield http


async def test_the_api_lists_only_chats_named_like_q(
    client: httpx.AsyncClient, make_chat: MakeChat
) -> None:
    wanted = await make_chat(user_uuid=LOCAL_USER_UUID, name="Trip to Lisbon")
    await make_chat(user_uuid=LOCAL_USER_UUID, name="Groceries")

    found = await client.get("/api/chats", params={"q": "lisbon"})
    too_long = await client.get("/api/chats", params={"q": "x" * 201})

    assert found.status_code == 200
    assert [item["chat_uuid"] for item in found.json()["items"]] == [str(wanted.chat_uuid)]
    assert too_long.status_code == 422
    assert "200" in too_long.text


def test_the_cli_lists_only_chats_named_like_search(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'threadstore.db'}"

    async def seed() -> None:
        async with await open_store(db) as store:
            for thread, name in (("t1", "Weekly Report"), ("t2", "Groceries")):
                await store.create_chat(
                    ChatCreate(user_uuid=user_uuid_for("local"), thread_id=thread, name=name)
                )

    asyncio.run(seed())
    runner = CliRunner()
    env = {"COLUMNS": "200", "THREADSTORE_DB": ""}

    everyone = runner.invoke(app, ["chats", "list", "--db", db, "--search", "report"], env=env)
    mine = runner.invoke(
        app, ["chats", "list", "--db", db, "--user", "local", "--search", "REPORT"], env=env
    )

    for result in (everyone, mine):
        assert result.exit_code == 0, result.output
        assert "Weekly Report" in result.output
        assert "Groceries" not in result.output
