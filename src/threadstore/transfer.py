"""Export a chat as one JSON document and import it back, for the API and the CLI.

An export holds the chat and its history (the active branch, oldest first) with each
message's tool calls and reasoning steps. Importing creates a new chat for the
importing user, with fresh uuids, in one transaction: it lands whole or not at all.
The CLI writes one export per line (JSON lines).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, Field

from threadstore.errors import ConflictError, LimitExceededError
from threadstore.models import (
    FORMAT_VERSION,
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageToolCallCreate,
    Reasoning,
    ToolCall,
    utcnow,
)
from threadstore.store.base import Store

__all__ = ["EXPORT_FORMAT", "ChatExport", "export_chat", "import_chat"]

EXPORT_FORMAT = "threadstore.chat"
"""The ``format`` tag of an export document."""


class ChatExport(BaseModel):
    """One chat and its history, as exported (``GET /api/chats/{id}/export``)."""

    format: Literal["threadstore.chat"] = "threadstore.chat"
    format_version: int = FORMAT_VERSION
    exported_at: datetime = Field(default_factory=utcnow)
    chat: Chat
    messages: list[Message] = Field(default_factory=list)
    """The active branch, oldest first, each with its tool calls and reasoning."""


async def export_chat(store: Store, chat: Chat) -> ChatExport:
    """Return the export document of ``chat``."""
    messages = [message async for message in store.iter_chat_messages(chat.chat_uuid)]
    return ChatExport(chat=chat, messages=messages)


async def import_chat(
    store: Store,
    document: ChatExport,
    *,
    user_uuid: UUID,
    thread_id: str | None = None,
    max_messages: int | None = None,
) -> Chat:
    """Create ``document``'s chat for ``user_uuid`` (under ``thread_id`` if given).

    Raises :class:`~threadstore.errors.ConflictError` when the user already has a
    chat with that thread id; nothing is written then.
    """
    if max_messages is not None and len(document.messages) > max_messages:
        raise LimitExceededError(
            f"the export holds {len(document.messages)} messages; the limit is {max_messages}"
        )
    source = document.chat
    thread = thread_id or source.thread_id
    async with store.transaction():
        if await store.get_chat_by_thread_id(user_uuid, thread) is not None:
            raise ConflictError(
                f"a chat with thread id {thread!r} already exists; import it under another id"
            )
        chat = await store.create_chat(
            ChatCreate(
                user_uuid=user_uuid,
                thread_id=thread,
                name=source.name,
                tenant_id=source.tenant_id,
                app_id=source.app_id,
                state=source.state,
                metadata=source.metadata,
            )
        )
        new_uuids: dict[UUID, UUID] = {}  # exported message uuid -> imported one
        created_by_index: dict[int, UUID] = {}
        last: UUID | None = None
        for index, record in _in_production_order(document.messages):
            if isinstance(record, Message):
                created = await store.create_message(_message_create(record, chat, new_uuids))
                new_uuids[record.message_uuid] = created.message_uuid
                created_by_index[index] = last = created.message_uuid
            elif isinstance(record, ToolCall):
                await store.create_message_tool_call(
                    _tool_call_create(record, created_by_index[index])
                )
            else:
                await store.create_message_reasoning(
                    _reasoning_create(record, created_by_index[index])
                )
        if last is not None:
            await store.set_active_leaf(chat.chat_uuid, last)
        imported = await store.get_chat(chat.chat_uuid)
    return imported or chat


def _in_production_order(
    messages: list[Message],
) -> list[tuple[int, Message | ToolCall | Reasoning]]:
    """Return (message index, record) in the original seq order, each message first.

    Recreating records in that order keeps the interleaving of text, tool calls and
    reasoning; a child whose seq says otherwise waits for its message.
    """
    keyed: list[tuple[int, int, int, Message | ToolCall | Reasoning]] = []
    for index, message in enumerate(messages):
        keyed.append((message.seq, 0, index, message))
        keyed.extend((call.seq, 1, index, call) for call in message.tool_calls)
        keyed.extend((step.seq, 2, index, step) for step in message.reasonings)
    keyed.sort(key=lambda item: (item[0], item[1], item[2]))
    ordered: list[tuple[int, Message | ToolCall | Reasoning]] = []
    waiting: dict[int, list[ToolCall | Reasoning]] = {}
    emitted: set[int] = set()
    for _, _, index, record in keyed:
        if isinstance(record, Message):
            ordered.append((index, record))
            emitted.add(index)
            ordered.extend((index, child) for child in waiting.pop(index, []))
        elif index in emitted:
            ordered.append((index, record))
        else:
            waiting.setdefault(index, []).append(record)
    return ordered


def _message_create(message: Message, chat: Chat, new_uuids: dict[UUID, UUID]) -> MessageCreate:
    parent = new_uuids.get(message.parent_uuid) if message.parent_uuid else None
    return MessageCreate(
        chat_uuid=chat.chat_uuid,
        role=message.role,
        content=message.content,
        agui_id=message.agui_id,
        parent_uuid=parent,
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
    )


def _tool_call_create(call: ToolCall, message_uuid: UUID) -> MessageToolCallCreate:
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


def _reasoning_create(step: Reasoning, message_uuid: UUID) -> MessageReasoningCreate:
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
