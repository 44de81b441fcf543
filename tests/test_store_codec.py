"""The store's fast model constructor and row loader build what pydantic's own paths build.

``codec.constructor`` is held to ``model_construct`` (its reference), and a history
read through the trusted row loader to the same history read through full
validation (a model subclass always takes that path).
"""

from __future__ import annotations

from datetime import UTC, datetime
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
    Reasoning,
    Store,
    ToolCall,
    open_store,
)
from threadstore.store._codec import construct, constructor


def _fields(model: type[Any]) -> dict[str, Any]:
    now = datetime.now(UTC)
    sample: dict[type[Any], Any] = {
        Message: Message(
            message_uuid=uuid4(),
            chat_uuid=uuid4(),
            content="hi",
            metadata={"k": [1]},
            seq=3,
            created_at=now,
            updated_at=now,
        ),
        ToolCall: ToolCall(
            uuid=uuid4(),
            message_uuid=uuid4(),
            tool_call_id="c",
            name="f",
            seq=1,
            created_at=now,
            updated_at=now,
        ),
        Reasoning: Reasoning(
            uuid=uuid4(),
            message_uuid=uuid4(),
            content="think",
            seq=2,
            created_at=now,
            updated_at=now,
        ),
    }
    return dict(sample[model])


@pytest.mark.parametrize("model", [Message, ToolCall, Reasoning])
def test_the_fast_constructor_builds_what_model_construct_builds(model: type[Any]) -> None:
    fields = _fields(model)
    fast = constructor(model)(dict(fields))
    reference = construct(model, dict(fields))

    assert type(fast) is type(reference)
    assert fast == reference
    assert [name for name, _ in fast] == [name for name, _ in reference]
    assert fast.model_fields_set == reference.model_fields_set == set(model.model_fields)
    assert fast.model_extra == reference.model_extra
    # Each instance owns its set of set fields, as a copy would.
    assert constructor(model)(dict(fields)).model_fields_set is not fast.model_fields_set
    assert fast.model_dump_json() == reference.model_dump_json()


class ValidatedMessage(Message):
    """A subclass with no fields of its own: the store validates its rows in full."""


class ValidatedToolCall(ToolCall):
    """As above, for tool calls."""


class ValidatedReasoning(Reasoning):
    """As above, for reasoning steps."""


async def _history(url: str, **models: Any) -> list[dict[str, Any]]:
    store: Store = await open_store(url, history_cache_messages=0, **models)
    try:
        (chat,) = await store.get_all_chats()
        return [m.model_dump(mode="json") for m in await store.get_chat_messages(chat.chat_uuid)]
    finally:
        await store.close()


async def test_a_history_read_fast_equals_the_same_history_validated(
    store_url: str, store: Store
) -> None:
    if store_url.startswith("memory"):
        pytest.skip("the in-memory store has no rows to load")
    chat: Chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
    user = await store.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role="user", content="hi", metadata={"a": 1})
    )
    answer = await store.create_message(
        MessageCreate(
            chat_uuid=chat.chat_uuid,
            content="",
            content_parts=[{"type": "text", "text": "x"}],
            activity_type="plan",
            activity_content={"steps": [1, 2]},
            run_id="r",
            step_name="s",
            in_progress=True,
        )
    )
    await store.create_message_reasoning(
        MessageReasoningCreate(message_uuid=answer.message_uuid, content="think")
    )
    await store.create_message_tool_call(
        MessageToolCallCreate(
            message_uuid=answer.message_uuid, tool_call_id="c", name="f", arguments="{}"
        )
    )

    fast = await _history(store_url)
    validated = await _history(
        store_url,
        message_model=ValidatedMessage,
        tool_call_model=ValidatedToolCall,
        reasoning_model=ValidatedReasoning,
    )

    assert fast == validated
    assert [m["message_uuid"] for m in fast] == [str(user.message_uuid), str(answer.message_uuid)]
    assert [len(fast[1]["tool_calls"]), len(fast[1]["reasonings"])] == [1, 1]
