"""The admin listing of every user's chats: paged over real HTTP, refused to other users."""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

from server_support import served_with_store
from threadstore import ChatCreate, open_store
from threadstore.server import HeaderAuth, user_uuid_for
from threadstore.server._demo_agent import DemoAgent


async def test_an_admin_pages_through_every_users_chats_and_others_are_refused(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'admin.db'}"
    seeded = await open_store(url)
    made = set()
    try:
        for owner in ("carol", "dave", "erin"):
            for n in range(3):
                chat = await seeded.create_chat(
                    ChatCreate(user_uuid=user_uuid_for(owner), thread_id=f"{owner}-{n}")
                )
                made.add(str(chat.chat_uuid))
    finally:
        await seeded.close()

    options = {"auth": HeaderAuth("X-User-Id"), "admins": ["root"]}
    async with served_with_store(url, DemoAgent(delay=0), **options) as (client, _):
        root = {"X-User-Id": "root"}
        seen: list[str] = []
        cursor = None
        while True:
            params = {"limit": 4} | ({"cursor": cursor} if cursor else {})
            page = await client.get("/api/admin/chats", params=params, headers=root)
            assert page.status_code == 200, page.text
            body = page.json()
            assert len(body["items"]) <= 4
            seen += [item["chat_uuid"] for item in body["items"]]
            cursor = body["next_cursor"]
            if cursor is None:
                break
        assert sorted(seen) == sorted(made)

        dave = str(user_uuid_for("dave"))
        only = await client.get("/api/admin/chats", params={"user": dave}, headers=root)
        assert {item["user_uuid"] for item in only.json()["items"]} == {dave}

        refused = await client.get("/api/admin/chats", headers={"X-User-Id": "carol"})
        assert refused.status_code == 403
        assert "admins" in refused.json()["detail"]

        bad = await client.get("/api/admin/chats", params={"cursor": "nope"}, headers=root)
        assert 400 <= bad.status_code < 500
        assert "cursor" in bad.text
        assert (
            await client.get("/api/admin/chats", params={"limit": 0}, headers=root)
        ).status_code == 422
        assert (
            await client.get("/api/admin/chats", params={"user": str(uuid4())}, headers=root)
        ).json()["items"] == []
