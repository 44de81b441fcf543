"""Copies of stored records: the creates that rebuild a message with its children.

Forking a chat and importing an export both recreate messages elsewhere (another
chat, another database) with fresh uuids; the fields a copy keeps are listed here once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

from threadstore.models import (
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageToolCallCreate,
    Reasoning,
    ToolCall,
)

if TYPE_CHECKING:
    from threadstore.store.base import Store

__all__ = ["copy_message", "message_create", "reasoning_create", "tool_call_create"]


def message_create(message: Message, chat_uuid: UUID, parent_uuid: UUID | None) -> MessageCreate:
    """The create of a copy of ``message`` (not its children) under ``parent_uuid``."""
    return MessageCreate(
        chat_uuid=chat_uuid,
        role=message.role,
        content=message.content,
        agui_id=message.agui_id,
        parent_uuid=parent_uuid,
        name=message.name,
        content_parts=message.content_parts,
        encrypted_value=message.encrypted_value,
        activity_type=message.activity_type,
        activity_content=message.activity_content,
        status=message.status,
        in_progress=message.in_progress,
        step_name=message.step_name,
        run_id=message.run_id,
        metadata=message.metadata,
        created_at=message.created_at,
        error=message.error,
    )


def tool_call_create(call: ToolCall, message_uuid: UUID) -> MessageToolCallCreate:
    """The create of a copy of ``call`` on the message ``message_uuid``."""
    return MessageToolCallCreate(
        message_uuid=message_uuid,
        tool_call_id=call.tool_call_id,
        name=call.name,
        arguments=call.arguments,
        content=call.content,
        result_message_id=call.result_message_id,
        error=call.error,
        status=call.status,
        in_progress=call.in_progress,
        step_name=call.step_name,
        metadata=call.metadata,
    )


def reasoning_create(step: Reasoning, message_uuid: UUID) -> MessageReasoningCreate:
    """The create of a copy of ``step`` on the message ``message_uuid``."""
    return MessageReasoningCreate(
        message_uuid=message_uuid,
        agui_id=step.agui_id,
        name=step.name,
        content=step.content,
        encrypted_value=step.encrypted_value,
        status=step.status,
        in_progress=step.in_progress,
        step_name=step.step_name,
        metadata=step.metadata,
    )


async def copy_message(
    store: Store, message: Message, chat_uuid: UUID, parent_uuid: UUID | None
) -> UUID:
    """Copy ``message`` and its children into ``chat_uuid`` under ``parent_uuid``.

    A copy with no parent is a root. Tool calls and reasoning steps are created in
    their ``seq`` order, so their interleaving survives. Returns the copy's uuid.
    """
    data = message_create(message, chat_uuid, parent_uuid)
    if parent_uuid is None:
        created = await store.create_root_message(data)
    else:
        created = await store.create_message(data)
    children: list[ToolCall | Reasoning] = [*message.tool_calls, *message.reasonings]
    for child in sorted(children, key=lambda record: record.seq):
        if isinstance(child, ToolCall):
            await store.create_message_tool_call(tool_call_create(child, created.message_uuid))
        else:
            await store.create_message_reasoning(reasoning_create(child, created.message_uuid))
    return created.message_uuid
