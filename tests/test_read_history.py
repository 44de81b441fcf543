"""``Store.read_history``: the whole history the faces and runs convert at once.

Its reference is ``get_chat_messages``; from the history cache it builds new models of
the compact entries kept, so what any reader gets is its own. Every test runs on every
backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import uuid4

import pytest

from threadstore import (
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageToolCallCreate,
    Store,
)
from threadstore.models import TextPart


async def _rich_chat(store: Store) -> Chat:
    chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id=f"t-{uuid4()}"))
    await store.create_message(
        MessageCreate(
            chat_uuid=chat.chat_uuid,
            role="user",
            content="look",
            content_parts=[TextPart(text="look")],
            metadata={"nested": {"list": [1, {"deep": "x"}]}, "n": 1.5},
        )
    )
    answer = await store.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role="assistant", content="", agui_id="a1")
    )
    await store.create_message_reasoning(
        MessageReasoningCreate(
            message_uuid=answer.message_uuid, content="think", metadata={"k": [1]}
        )
    )
    await store.create_message_tool_call(
        MessageToolCallCreate(
            message_uuid=answer.message_uuid,
            tool_call_id="c1",
            name="lookup",
            arguments='{"q": 1}',
            metadata={"k": {"v": 2}},
        )
    )
    return chat


def _dumps(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [message.model_dump() for message in messages]


async def read(store: Store, chat_uuid: Any, convert: Any) -> Any:
    return convert(await store.messages.read_history(chat_uuid))


async def test_a_read_equals_converting_what_get_chat_messages_returns(store: Store) -> None:
    chat = await _rich_chat(store)
    cold = await read(store, chat.chat_uuid, _dumps)
    warm = await read(store, chat.chat_uuid, _dumps)
    assert cold == warm == _dumps(await store.get_chat_messages(chat.chat_uuid))

    await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="later"))
    after_write = await read(store, chat.chat_uuid, _dumps)
    assert after_write == _dumps(await store.get_chat_messages(chat.chat_uuid))
    assert [m["content"] for m in after_write] == ["look", "", "later"]

    async with store.transaction():
        await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="inside"))
        inside = await read(store, chat.chat_uuid, _dumps)
        assert inside == _dumps(await store.get_chat_messages(chat.chat_uuid))
        assert inside[-1]["content"] == "inside"

    assert await read(store, uuid4(), _dumps) == []


@pytest.mark.parametrize("first", ["get_chat_messages", "read_history"])
async def test_what_get_chat_messages_hands_out_stays_apart_from_what_read_gets(
    store: Store, first: str
) -> None:
    chat = await _rich_chat(store)
    await store.get_chat_messages(chat.chat_uuid)
    # The first read after a write fills the cache, where the backend caches.
    await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="later"))
    if first == "get_chat_messages":
        reference = _dumps(await store.get_chat_messages(chat.chat_uuid))
    else:
        reference = await read(store, chat.chat_uuid, _dumps)

    one = await read(store, chat.chat_uuid, list)
    two = await read(store, chat.chat_uuid, list)
    # Each read is the reader's own: changing it changes no other read.
    assert _dumps(one) == _dumps(two)
    assert not any(a is b for a, b in zip(one, two, strict=True))
    one[0].metadata["nested"]["list"].append("changed by a reader")

    handed_out = await store.get_chat_messages(chat.chat_uuid)
    assert not any(a is b for a, b in zip(one, handed_out, strict=True))
    handed_out[0].metadata["nested"]["list"].append("changed")
    handed_out[0].content_parts.clear()  # type: ignore[union-attr]
    handed_out[1].tool_calls[0].metadata["k"]["v"] = 3
    handed_out[1].reasonings.clear()

    assert _dumps(await read(store, chat.chat_uuid, list)) == reference
    assert _dumps(await store.get_chat_messages(chat.chat_uuid)) == reference
