"""Soft delete: a chat hidden from every read, restorable within its retention, purged after."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from uuid import UUID, uuid4

import httpx
import pytest
from typer.testing import CliRunner

from conftest import AddMessage, MakeChat
from server_support import demo_client, run_input
from threadstore import ChatCreate, MessageCreate, Role, Store, open_store
from threadstore.cli import app
from threadstore.models import utcnow
from threadstore.server import LOCAL_USER_UUID


async def test_a_soft_deleted_chat_is_hidden_from_every_read(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat(name="Hidden")
    kept = await make_chat(user_uuid=chat.user_uuid, name="Kept")
    message = await add_message(chat, "secret", role=Role.USER, agui_id="u1")

    deleted = await store.delete_chat(chat.chat_uuid, soft=True)

    assert deleted is not None and deleted.chat_uuid == chat.chat_uuid
    assert await store.chats.get_chat(chat.chat_uuid) is None
    assert await store.get_chat_by_thread_id(chat.user_uuid, chat.thread_id) is None
    listed = await store.chats.list_chats(chat.user_uuid)
    assert [c.chat_uuid for c in listed.items] == [kept.chat_uuid]
    assert [c.chat_uuid for c in await store.get_all_chats()] == [kept.chat_uuid]
    assert await store.get_chat_messages(chat.chat_uuid) == []
    assert await store.get_chat_messages(chat.chat_uuid, after=0, limit=10) == []
    assert await store.get_message(message.message_uuid) is None
    assert await store.get_message_by_agui_id(chat.chat_uuid, "u1") is None
    assert await store.get_last_messages([chat.chat_uuid]) == {}
    # Deleting it again finds nothing: it is already gone for every caller.
    assert await store.delete_chat(chat.chat_uuid, soft=True) is None


async def test_a_restored_chat_comes_back_whole(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat(name="Back")
    await add_message(chat, "question", role=Role.USER)
    await add_message(chat, "answer", role=Role.ASSISTANT)
    assert await store.get_chat_messages(chat.chat_uuid)  # a cached history, on SQLite
    await store.delete_chat(chat.chat_uuid, soft=True)

    stranger = await store.chats.restore_chat(chat.chat_uuid, user_uuid=uuid4())
    restored = await store.chats.restore_chat(chat.chat_uuid, user_uuid=chat.user_uuid)

    assert stranger is None
    assert restored is not None and restored.name == "Back"
    assert await store.chats.get_chat(chat.chat_uuid) == restored
    history = await store.get_chat_messages(chat.chat_uuid)
    assert [m.content for m in history] == ["question", "answer"]
    assert await store.chats.restore_chat(chat.chat_uuid) is None  # it is no longer deleted


async def test_a_chat_cannot_be_restored_after_its_retention(
    store: Store, make_chat: MakeChat
) -> None:
    chat = await make_chat()
    await store.delete_chat(chat.chat_uuid, soft=True)
    store.deleted_retention = timedelta(0)

    assert await store.chats.restore_chat(chat.chat_uuid) is None


async def test_purge_deletes_for_good_only_chats_past_their_retention(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    old = await make_chat()
    await add_message(old, "gone soon")
    recent = await make_chat()
    live = await make_chat()
    await store.delete_chat(old.chat_uuid, soft=True)
    cutoff = utcnow()
    await store.delete_chat(recent.chat_uuid, soft=True)

    purged = await store.chats.purge_deleted_chats(older_than=cutoff)

    assert purged == 1
    assert await store.chats.restore_chat(old.chat_uuid) is None
    assert await store.chats.restore_chat(recent.chat_uuid) is not None
    assert await store.chats.get_chat(live.chat_uuid) is not None
    assert await store.chats.purge_deleted_chats(older_than=utcnow()) == 0


async def test_hard_delete_stays_the_default_and_is_final(
    store: Store, make_chat: MakeChat
) -> None:
    chat = await make_chat()
    soft_deleted = await make_chat()
    await store.delete_chat(soft_deleted.chat_uuid, soft=True)

    assert await store.delete_chat(chat.chat_uuid) is not None
    assert await store.delete_chat(soft_deleted.chat_uuid) is not None  # emptying the bin

    for gone in (chat, soft_deleted):
        assert await store.chats.restore_chat(gone.chat_uuid) is None
        assert await store.chats.get_chat(gone.chat_uuid) is None


async def test_a_soft_deleted_thread_is_free_for_a_new_chat(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    await add_message(chat, "old")
    await store.delete_chat(chat.chat_uuid, soft=True)

    fresh = await store.create_chat(
        ChatCreate(user_uuid=chat.user_uuid, thread_id=chat.thread_id, name="new")
    )
    await store.create_message(
        MessageCreate(chat_uuid=fresh.chat_uuid, role=Role.USER, content="new start")
    )

    assert fresh.chat_uuid != chat.chat_uuid
    found = await store.get_chat_by_thread_id(chat.user_uuid, chat.thread_id)
    assert found is not None and found.chat_uuid == fresh.chat_uuid
    assert [m.content for m in await store.get_chat_messages(fresh.chat_uuid)] == ["new start"]
    assert await store.chats.restore_chat(chat.chat_uuid) is None  # the old one was purged


@pytest.fixture
async def client(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an app serving ``store`` as the single local user."""
    async with demo_client(store) as http:
        yield http


async def test_the_api_soft_deletes_and_restores_a_chat(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat(user_uuid=LOCAL_USER_UUID, name="Bin me")
    await add_message(chat, "hello", role=Role.USER)
    url = f"/api/chats/{chat.chat_uuid}"

    deleted = await client.delete(url, params={"soft": "true"})
    hidden = [await client.get(url), await client.get(f"{url}/messages")]
    listed = (await client.get("/api/chats")).json()["items"]
    connect = await client.get(f"/agui/threads/{chat.thread_id}/connect")
    restored = await client.post(f"{url}/restore")
    again = await client.post(f"{url}/restore")
    messages = (await client.get(f"{url}/messages")).json()["items"]

    assert deleted.status_code == 204
    assert [r.status_code for r in hidden] == [404, 404]
    assert listed == []
    assert connect.status_code == 404
    assert restored.status_code == 200 and restored.json()["name"] == "Bin me"
    assert again.status_code == 404
    assert "restore" in again.json()["detail"]
    assert [m["content"] for m in messages] == ["hello"]


async def test_a_run_on_a_soft_deleted_thread_starts_a_new_chat(
    client: httpx.AsyncClient, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat(user_uuid=LOCAL_USER_UUID)
    await add_message(chat, "old question", role=Role.USER)
    await client.delete(f"/api/chats/{chat.chat_uuid}", params={"soft": "true"})

    response = await client.post(
        "/agui", json=run_input("fresh", thread_id=chat.thread_id, run_id="r1")
    )
    listed = (await client.get("/api/chats")).json()["items"]

    assert response.status_code == 200
    assert "RUN_FINISHED" in response.text
    assert len(listed) == 1 and listed[0]["chat_uuid"] != str(chat.chat_uuid)
    history = (await client.get(f"/api/chats/{listed[0]['chat_uuid']}/messages")).json()
    assert "old question" not in [m["content"] for m in history["items"]]


def test_sweep_purges_chats_deleted_longer_ago_than_the_retention(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'threadstore.db'}"

    async def soft_deleted_chat() -> str:
        async with await open_store(db) as store:
            chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
            await store.delete_chat(chat.chat_uuid, soft=True)
            return str(chat.chat_uuid)

    async def restorable(chat_id: str) -> bool:
        async with await open_store(db) as store:
            return await store.chats.restore_chat(UUID(chat_id)) is not None

    chat_id = asyncio.run(soft_deleted_chat())
    runner = CliRunner()
    env = {"COLUMNS": "200", "THREADSTORE_DB": ""}

    kept = runner.invoke(app, ["sweep", "--db", db], env=env)
    purged = runner.invoke(app, ["sweep", "--db", db, "--deleted-retention", "0"], env=env)

    assert kept.exit_code == 0, kept.output
    assert "purged 0 soft-deleted chat(s)" in kept.output
    assert purged.exit_code == 0, purged.output
    assert "purged 1 soft-deleted chat(s)" in purged.output
    assert asyncio.run(restorable(chat_id)) is False
