"""What a framework hands over is whole: its messages and tool calls are stored finished."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from threadstore.models import MessageCreate, MessageStatus, MessageToolCallCreate


def finished_message(chat_uuid: UUID, **fields: Any) -> MessageCreate:
    """A message of the chat, complete and no longer streaming, with ``fields``."""
    return MessageCreate(
        chat_uuid=chat_uuid, status=MessageStatus.COMPLETE, in_progress=False, **fields
    )


def finished_tool_call(
    message_uuid: UUID, tool_call_id: str, name: str, arguments: str
) -> MessageToolCallCreate:
    """A tool call of the message, complete and no longer streaming."""
    return MessageToolCallCreate(
        message_uuid=message_uuid,
        tool_call_id=tool_call_id,
        name=name,
        arguments=arguments,
        status=MessageStatus.COMPLETE,
        in_progress=False,
    )
