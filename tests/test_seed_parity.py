"""Parity with the seed layer: what a user switching from it writes is stored as it meant."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest
from pydantic import ValidationError

from threadstore import Message, MessageCreate, MessageUpdate, Role, Store

CHAT = uuid4()


# --- item 19: defaults and the seed's field names ----------------------------------------


def test_a_message_without_a_role_is_a_user_message_as_in_the_seed() -> None:
    assert MessageCreate(chat_uuid=CHAT).role is Role.USER
    assert Message(message_uuid=uuid4(), chat_uuid=CHAT).role is Role.USER


def test_the_seeds_field_names_are_accepted_as_aliases() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    create = MessageCreate(
        chat_id=CHAT, step="plan", timestamp=when, error="boom", metadata={"k": 1}
    )

    assert (create.chat_uuid, create.step_name, create.created_at) == (CHAT, "plan", when)
    assert create.metadata == {"k": 1, "error": "boom"}
    message = Message.model_validate(
        {"message_uuid": uuid4(), "chat_id": CHAT, "step": "s", "timestamp": when, "v": 1}
    )
    assert (message.chat_uuid, message.step_name, message.created_at) == (CHAT, "s", when)
    assert message.format_version == 1
    assert MessageUpdate(step="act").step_name == "act"


def test_a_seed_field_with_no_place_here_is_refused_loudly() -> None:
    with pytest.raises(ValidationError, match="format_version"):
        MessageCreate(chat_uuid=CHAT, v=1)
    with pytest.raises(ValidationError, match="metadata"):
        MessageUpdate(error="boom")  # would either be dropped or wipe the metadata


def test_the_native_names_still_work_and_win_nothing_silently() -> None:
    create = MessageCreate(chat_uuid=CHAT, step_name="s", error=None)

    assert create.step_name == "s" and create.metadata == {}
    assert MessageUpdate(error="e", metadata={"a": 1}).metadata == {"a": 1, "error": "e"}


async def test_seed_style_dtos_are_stored_with_every_field(store: Store) -> None:
    from threadstore import ChatCreate

    chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    created = await store.create_message(
        MessageCreate(chat_id=chat.chat_uuid, step="plan", timestamp=when, error="boom")
    )

    stored = await store.get_message(created.message_uuid)
    assert stored is not None
    assert (stored.role, stored.step_name, stored.created_at) == (Role.USER, "plan", when)
    assert stored.error == "boom"
    assert stored.model_dump()["error"] == "boom"
