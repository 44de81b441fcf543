"""Copies of stored records: the creates that rebuild a message with its children.

Forking a chat and importing an export both recreate messages elsewhere (another
chat, another database) with fresh uuids. A copy keeps every field its create shares
with the record but its ids, so a field added to both is copied with no change here.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID, uuid4

from pydantic import BaseModel

from threadstore.models import (
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageToolCallCreate,
    Reasoning,
    ToolCall,
)

if TYPE_CHECKING:
    from threadstore.store._base import Store

__all__ = [
    "chat_create",
    "copy_message",
    "message_create",
    "reasoning_create",
    "tool_call_create",
]


_FRESH = frozenset({"uuid", "message_uuid"})
"""A copy's own id is new; a child's ``message_uuid`` (its parent) is given per copy."""

_R = TypeVar("_R", bound=BaseModel)


@functools.cache
def _kept_fields(record_type: type[BaseModel], create_type: type[BaseModel]) -> tuple[str, ...]:
    """The fields a copy keeps: every field the create shares with the record but its ids."""
    fields = record_type.model_fields
    return tuple(name for name in create_type.model_fields if name in fields and name not in _FRESH)


def _create_of(record: BaseModel, create_type: type[_R], **placed: Any) -> _R:
    fields = {name: getattr(record, name) for name in _kept_fields(type(record), create_type)}
    return create_type(**(fields | placed))


def chat_create(chat: Chat, **placed: Any) -> ChatCreate:
    """The create of a copy of ``chat`` under a new uuid, with the fields ``placed``."""
    return _create_of(chat, ChatCreate, chat_uuid=uuid4(), **placed)


def message_create(message: Message, chat_uuid: UUID, parent_uuid: UUID | None) -> MessageCreate:
    """The create of a copy of ``message`` (not its children) under ``parent_uuid``."""
    return _create_of(message, MessageCreate, chat_uuid=chat_uuid, parent_uuid=parent_uuid)


def tool_call_create(call: ToolCall, message_uuid: UUID) -> MessageToolCallCreate:
    """The create of a copy of ``call`` on the message ``message_uuid``."""
    return _create_of(call, MessageToolCallCreate, message_uuid=message_uuid)


def reasoning_create(step: Reasoning, message_uuid: UUID) -> MessageReasoningCreate:
    """The create of a copy of ``step`` on the message ``message_uuid``."""
    return _create_of(step, MessageReasoningCreate, message_uuid=message_uuid)


async def copy_message(
    store: Store, message: Message, chat_uuid: UUID, parent_uuid: UUID | None
) -> UUID:
    """Copy ``message`` and its children into ``chat_uuid`` under ``parent_uuid``.

    A copy with no parent is a root. Tool calls and reasoning steps are created in
    their ``seq`` order, so their interleaving survives. Returns the copy's uuid.
    """
    data = message_create(message, chat_uuid, parent_uuid)
    if parent_uuid is None:
        created = await store.branches.create_root_message(data)
    else:
        created = await store.create_message(data)
    children: list[ToolCall | Reasoning] = [*message.tool_calls, *message.reasonings]
    for child in sorted(children, key=lambda record: record.seq):
        if isinstance(child, ToolCall):
            await store.create_message_tool_call(tool_call_create(child, created.message_uuid))
        else:
            await store.create_message_reasoning(reasoning_create(child, created.message_uuid))
    return created.message_uuid
