"""Two stores on one database (two processes of an app) see one set of chats."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from conftest import StoreOpener
from threadstore import ChatCreate, MessageCreate


async def test_two_stores_on_one_database_create_a_thread_once(
    store_url: str, open_test_store: StoreOpener
) -> None:
    if store_url.startswith("memory"):
        pytest.skip("memory stores do not share data between instances")
    first, second = await open_test_store(), await open_test_store()
    user = uuid.uuid4()

    chats = await asyncio.gather(
        *(
            each.create_chat(ChatCreate(user_uuid=user, thread_id="same"))
            for _ in range(10)
            for each in (first, second)
        )
    )

    assert len({c.chat_uuid for c in chats}) == 1
    message = await first.create_message(MessageCreate(chat_uuid=chats[0].chat_uuid, content="x"))
    assert await second.get_message(message.message_uuid) == message
