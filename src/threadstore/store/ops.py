"""Typed write operations: what :meth:`Store.apply_writes` takes, one record per write.

Each operation is a frozen dataclass holding the arguments of one write method of
the store (its :attr:`method` names it, for logs and counters). A batch is a list of
them; a backend matches on their types, never on method-name strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar
from uuid import UUID

from threadstore.models import (
    MessageCreate,
    MessageReasoningCreate,
    MessageReasoningUpdate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    RunStatus,
)

__all__ = [
    "WRITE_METHODS",
    "WRITE_TYPES",
    "CreateMessage",
    "CreateReasoning",
    "CreateToolCall",
    "FinalizeRunRecords",
    "FinishRun",
    "RenameChat",
    "UpdateChatState",
    "UpdateMessage",
    "UpdateReasoning",
    "UpdateToolCall",
    "Write",
    "apply_to",
]


@dataclass(frozen=True, slots=True)
class CreateMessage:
    """``create_message(data)``."""

    data: MessageCreate
    method: ClassVar[str] = "create_message"


@dataclass(frozen=True, slots=True)
class UpdateMessage:
    """``update_message(message_uuid, update)``."""

    message_uuid: UUID
    update: MessageUpdate
    method: ClassVar[str] = "update_message"


@dataclass(frozen=True, slots=True)
class CreateToolCall:
    """``create_message_tool_call(data)``."""

    data: MessageToolCallCreate
    method: ClassVar[str] = "create_message_tool_call"


@dataclass(frozen=True, slots=True)
class UpdateToolCall:
    """``update_message_tool_call(uuid, update)``."""

    uuid: UUID
    update: MessageToolCallUpdate
    method: ClassVar[str] = "update_message_tool_call"


@dataclass(frozen=True, slots=True)
class CreateReasoning:
    """``create_message_reasoning(data)``."""

    data: MessageReasoningCreate
    method: ClassVar[str] = "create_message_reasoning"


@dataclass(frozen=True, slots=True)
class UpdateReasoning:
    """``update_message_reasoning(uuid, update)``."""

    uuid: UUID
    update: MessageReasoningUpdate
    method: ClassVar[str] = "update_message_reasoning"


@dataclass(frozen=True, slots=True)
class RenameChat:
    """``update_chat_name(chat_uuid, name)``."""

    chat_uuid: UUID
    name: str
    method: ClassVar[str] = "update_chat_name"


@dataclass(frozen=True, slots=True)
class UpdateChatState:
    """``update_chat_state(chat_uuid, state)``."""

    chat_uuid: UUID
    state: Any
    method: ClassVar[str] = "update_chat_state"


@dataclass(frozen=True, slots=True)
class FinishRun:
    """``finish_run(chat_uuid, run_id, status, error)``."""

    chat_uuid: UUID
    run_id: str
    status: RunStatus
    error: str | None = None
    method: ClassVar[str] = "finish_run"


@dataclass(frozen=True, slots=True)
class FinalizeRunRecords:
    """``finalize_run_records(chat_uuid, run_id, status)``."""

    chat_uuid: UUID
    run_id: str
    status: MessageStatus
    method: ClassVar[str] = "finalize_run_records"


Write = (
    CreateMessage
    | UpdateMessage
    | CreateToolCall
    | UpdateToolCall
    | CreateReasoning
    | UpdateReasoning
    | RenameChat
    | UpdateChatState
    | FinishRun
    | FinalizeRunRecords
)
"""One write of a batch."""

WRITE_TYPES: tuple[type[Write], ...] = (
    CreateMessage,
    UpdateMessage,
    CreateToolCall,
    UpdateToolCall,
    CreateReasoning,
    UpdateReasoning,
    RenameChat,
    UpdateChatState,
    FinishRun,
    FinalizeRunRecords,
)

WRITE_METHODS = frozenset(cls.method for cls in WRITE_TYPES)
"""The store methods a batch's writes stand for."""


async def apply_to(repo: Any, write: Write) -> None:
    """Apply ``write`` through ``repo``'s method of the same name (any conforming repository)."""
    match write:
        case CreateMessage(data):
            await repo.create_message(data)
        case UpdateMessage(message_uuid, update):
            await repo.update_message(message_uuid, update)
        case CreateToolCall(data):
            await repo.create_message_tool_call(data)
        case UpdateToolCall(uuid, update):
            await repo.update_message_tool_call(uuid, update)
        case CreateReasoning(data):
            await repo.create_message_reasoning(data)
        case UpdateReasoning(uuid, update):
            await repo.update_message_reasoning(uuid, update)
        case RenameChat(chat_uuid, name):
            await repo.update_chat_name(chat_uuid, name)
        case UpdateChatState(chat_uuid, state):
            await repo.update_chat_state(chat_uuid, state)
        case FinishRun(chat_uuid, run_id, status, error):
            await repo.finish_run(chat_uuid, run_id, status, error)
        case FinalizeRunRecords(chat_uuid, run_id, status):
            await repo.finalize_run_records(chat_uuid, run_id, status)
