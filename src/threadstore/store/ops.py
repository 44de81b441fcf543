"""Typed write operations: the one way a write reaches a backend.

Each operation is a frozen dataclass holding the arguments of one write method of
the store (its :attr:`method` names it, for logs and counters). :data:`Write` is what
:meth:`Store.apply_writes` takes from callers; :data:`Op` adds the writes only the
store itself issues (chat creation, the tree, deletes, the run registry). A backend
implements every write as ``Store._apply(ops)`` and matches on these types, never on
method-name strings.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, ClassVar, get_args
from uuid import UUID

from threadstore import models

__all__ = [
    "CHAT_FIELD_WRITES",
    "WRITE_METHODS",
    "WRITE_TYPES",
    "ChatFieldWrite",
    "CreateChat",
    "CreateMessage",
    "CreateReasoning",
    "CreateToolCall",
    "DeleteChat",
    "FinalizeRunRecords",
    "FinishRun",
    "HeartbeatRuns",
    "MakeRoot",
    "Op",
    "RenameChat",
    "SetActiveLeaf",
    "SetDeletedAt",
    "StartRun",
    "UpdateChatMetadata",
    "UpdateChatState",
    "UpdateMessage",
    "UpdateReasoning",
    "UpdateToolCall",
    "Write",
    "apply_to",
]


@dataclass(frozen=True, slots=True)
class CreateMessage:
    data: models.MessageCreate
    method: ClassVar[str] = "create_message"


@dataclass(frozen=True, slots=True)
class UpdateMessage:
    message_uuid: UUID
    update: models.MessageUpdate
    method: ClassVar[str] = "update_message"


@dataclass(frozen=True, slots=True)
class CreateToolCall:
    data: models.MessageToolCallCreate
    method: ClassVar[str] = "create_message_tool_call"


@dataclass(frozen=True, slots=True)
class UpdateToolCall:
    uuid: UUID
    update: models.MessageToolCallUpdate
    method: ClassVar[str] = "update_message_tool_call"


@dataclass(frozen=True, slots=True)
class CreateReasoning:
    data: models.MessageReasoningCreate
    method: ClassVar[str] = "create_message_reasoning"


@dataclass(frozen=True, slots=True)
class UpdateReasoning:
    uuid: UUID
    update: models.MessageReasoningUpdate
    method: ClassVar[str] = "update_message_reasoning"


class _SetsChatField:
    """A write replacing the chat field named ``field`` whole with ``value``."""

    __slots__ = ()
    field: ClassVar[str]

    @property
    def value(self) -> Any:
        """The chat field's new value."""
        return getattr(self, self.field)


@dataclass(frozen=True, slots=True)
class RenameChat(_SetsChatField):
    chat_uuid: UUID
    name: str
    method: ClassVar[str] = "update_chat_name"
    field: ClassVar[str] = "name"


@dataclass(frozen=True, slots=True)
class UpdateChatState(_SetsChatField):
    chat_uuid: UUID
    state: Any
    method: ClassVar[str] = "update_chat_state"
    field: ClassVar[str] = "state"


@dataclass(frozen=True, slots=True)
class UpdateChatMetadata(_SetsChatField):
    chat_uuid: UUID
    metadata: dict[str, Any]
    method: ClassVar[str] = "update_chat_metadata"
    field: ClassVar[str] = "metadata"


ChatFieldWrite = RenameChat | UpdateChatState | UpdateChatMetadata
"""A write replacing one chat field whole (``field``, ``value``) and stamping its activity."""

CHAT_FIELD_WRITES = (RenameChat, UpdateChatState, UpdateChatMetadata)


@dataclass(frozen=True, slots=True)
class FinishRun:
    chat_uuid: UUID
    run_id: str
    status: models.RunStatus
    error: str | None = None
    method: ClassVar[str] = "finish_run"


@dataclass(frozen=True, slots=True)
class FinalizeRunRecords:
    chat_uuid: UUID
    run_id: str
    status: models.MessageStatus
    method: ClassVar[str] = "finalize_run_records"


# --- writes only the store issues -------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateChat:
    """``create_chat(data)``: idempotent by (user, thread); a soft-deleted one is purged."""

    data: models.ChatCreate
    method: ClassVar[str] = "create_chat"


@dataclass(frozen=True, slots=True)
class SetActiveLeaf:
    """``set_active_leaf(chat_uuid, message_uuid)``: ``NotFoundError`` if not the chat's."""

    chat_uuid: UUID
    message_uuid: UUID
    method: ClassVar[str] = "set_active_leaf"


@dataclass(frozen=True, slots=True)
class MakeRoot:
    """Detach a message of the chat from its parent; the chat is marked as branched."""

    chat_uuid: UUID
    message_uuid: UUID
    method: ClassVar[str] = "make_root"


@dataclass(frozen=True, slots=True)
class SetDeletedAt:
    """Stamp (or, with ``None``, clear) the soft-delete time of the chat ``where`` names.

    ``where`` is a ``ChatFilter`` naming one chat by uuid; the result is the chat, or
    ``None`` when no chat matched.
    """

    where: Any
    deleted_at: datetime | None
    method: ClassVar[str] = "set_deleted_at"


@dataclass(frozen=True, slots=True)
class DeleteChat:
    """Hard-delete a chat (live or soft-deleted) and every row it owns."""

    chat_uuid: UUID
    method: ClassVar[str] = "delete_chat"


@dataclass(frozen=True, slots=True)
class StartRun:
    """``start_run(run)``: idempotent by (chat, run_id); ``NotFoundError`` without the chat."""

    run: models.Run
    method: ClassVar[str] = "start_run"


@dataclass(frozen=True, slots=True)
class HeartbeatRuns:
    """``heartbeat_runs(owner, run_ids)`` (``run_ids`` is never empty)."""

    owner: str
    run_ids: tuple[tuple[UUID, str], ...]
    method: ClassVar[str] = "heartbeat_runs"


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

WRITE_TYPES: tuple[type[Write], ...] = get_args(Write)

WRITE_METHODS = frozenset(cls.method for cls in WRITE_TYPES)
"""The store methods a batch's writes stand for."""

Op = (
    Write
    | UpdateChatMetadata
    | CreateChat
    | SetActiveLeaf
    | MakeRoot
    | SetDeletedAt
    | DeleteChat
    | StartRun
    | HeartbeatRuns
)
"""One write a backend applies (``Store._apply``): a caller's :data:`Write` or the store's own.

What each one returns from ``_apply``: ``CreateChat`` a ``Chat``; a chat field write,
``SetActiveLeaf``, ``SetDeletedAt`` and ``DeleteChat`` the chat or ``None``; a create its
record; an update its record or ``None``; ``MakeRoot`` and ``HeartbeatRuns`` ``None``;
``StartRun`` and ``FinishRun`` the run (or ``None``); ``FinalizeRunRecords`` how many
records changed.
"""


async def apply_to(repo: Any, write: Write) -> None:
    """Apply ``write`` through ``repo``'s method of the same name (any conforming repository).

    Each write's fields are that method's arguments, in order.
    """
    await getattr(repo, write.method)(*(getattr(write, f.name) for f in fields(write)))
