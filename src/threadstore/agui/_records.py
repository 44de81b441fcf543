"""From fold records to writes: the DTOs a run's records are created with, and their updates.

A record is created once (from the DTO a build hook made when it opened) and then
updated with what changed since: writes per run are O(records), not O(events).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any, TypeVar
from uuid import UUID

from pydantic import BaseModel, create_model

from threadstore import models
from threadstore.fold import ConversationFold, FoldRecord, RecordKind
from threadstore.store import Write
from threadstore.store.ops import (
    CreateMessage,
    CreateReasoning,
    CreateToolCall,
    UpdateMessage,
    UpdateReasoning,
    UpdateToolCall,
)

__all__ = [
    "Entry",
    "as_update",
    "default_message_create",
    "default_reasoning_create",
    "default_tool_call_create",
    "dto_with_fields",
    "record_write",
]

_ModelT = TypeVar("_ModelT", bound=BaseModel)
_T = TypeVar("_T")


@dataclass(slots=True)
class Entry:
    """What the writer knows about one record."""

    create: BaseModel | None = None
    uuid: UUID | None = None
    created: bool = False
    uncertain: bool = False
    """A create was attempted in a flush that failed: check before creating again."""
    written_version: int = -1
    written_content_version: int = -1
    terminal: dict[str, Any] = field(default_factory=dict)
    """Fields ``message_update_fields`` gave when the message closed."""
    terminal_written: bool = True


def default_message_create(
    state: ConversationFold, chat: models.Chat, agui_id: str | None, role: models.Role | str | None
) -> models.MessageCreate:
    """The DTO that creates a new agent message (``StorageAgent.build_message_create``)."""
    return models.MessageCreate(
        chat_uuid=chat.chat_uuid,
        role=models.Role(role or models.Role.ASSISTANT),
        agui_id=agui_id,
        step_name=state.active_step,
        run_id=state.run_id,
        created_at=models.utcnow(),
    )


def default_tool_call_create(
    state: ConversationFold, chat: models.Chat, message_uuid: UUID, tool_call_id: str, name: str
) -> models.MessageToolCallCreate:
    """The DTO that creates a tool call nested in ``message_uuid``."""
    return models.MessageToolCallCreate(
        message_uuid=message_uuid,
        tool_call_id=tool_call_id,
        name=name,
        step_name=state.active_step,
    )


def default_reasoning_create(
    state: ConversationFold,
    chat: models.Chat,
    message_uuid: UUID,
    agui_id: str | None,
    name: str | None,
) -> models.MessageReasoningCreate:
    """The DTO that creates a reasoning step nested in ``message_uuid``."""
    return models.MessageReasoningCreate(
        message_uuid=message_uuid, agui_id=agui_id, name=name, step_name=state.active_step
    )


def record_write(record: FoldRecord, entry: Entry, error: str | None) -> Write:
    """The write bringing ``record`` up to date: a create the first time, then updates.

    ``error``: the text an errored record of the run carries.
    """
    content = record.content_version != entry.written_content_version and record.owned
    terminal = dict(entry.terminal) if not entry.terminal_written else {}
    base_metadata: dict[str, Any] = getattr(entry.create, "metadata", None) or {}
    metadata = {**base_metadata, **_copied(record.metadata)}
    common = {"status": record.status, "in_progress": record.in_progress}
    update_cls: type[BaseModel]
    if record.kind is RecordKind.MESSAGE:
        fields = {
            "content": record.content if content else None,
            "content_parts": _copied(record.content_parts) if content else None,
            "activity_content": _copied(record.activity_content) if content else None,
            "name": record.name,
            "encrypted_value": record.encrypted_value,
        }
        if record.agui_id is not None and getattr(entry.create, "agui_id", "") is None:
            # A message opened to hold reasoning took the id of the answer it precedes.
            fields["agui_id"] = record.agui_id
        if error is not None and record.owned:
            fields["error"] = error
        update_cls = models.MessageUpdate
    elif record.kind is RecordKind.TOOL_CALL:
        fields = {
            "arguments": record.content if content else None,
            "content": record.result,
            "result_message_id": record.result_message_id,
            "name": record.name or None,
            "error": error if record.owned else None,
        }
        update_cls = models.MessageToolCallUpdate
    else:
        fields = {
            "content": record.content if content else None,
            "encrypted_value": record.encrypted_value,
            "name": record.name,
        }
        if error is not None and record.owned:
            metadata[models.ERROR_METADATA_KEY] = error  # read back as Reasoning.error
        update_cls = models.MessageReasoningUpdate
    fields = _set({**fields, **common})
    if entry.created:
        patch = dto_with_fields(update_cls(**fields, metadata=metadata or None), terminal)
        assert entry.uuid is not None
        return as_update(patch, entry.uuid)
    extra = {"activity_type": record.activity_type} if record.activity_type else {}
    assert entry.create is not None
    return _create(
        dto_with_fields(entry.create, {**fields, **extra, "metadata": metadata, **terminal})
    )


def as_update(change: BaseModel | Write, uuid: UUID) -> Write:
    """The update write of record ``uuid``: from an update DTO, or from a create write.

    From a create, it is the update that brings an already-created record to what the
    create would write.
    """
    if isinstance(change, CreateMessage | CreateToolCall | CreateReasoning):
        create = change.data
        update_cls = next(u for c, u in _UPDATE_FOR_CREATE.items() if isinstance(create, c))
        fields = {name: getattr(create, name) for name in update_cls.model_fields}
        change = update_cls(**_set(fields))
    if isinstance(change, models.MessageUpdate):
        return UpdateMessage(uuid, change)
    if isinstance(change, models.MessageToolCallUpdate):
        return UpdateToolCall(uuid, change)
    assert isinstance(change, models.MessageReasoningUpdate)
    return UpdateReasoning(uuid, change)


def _create(dto: BaseModel) -> Write:
    """The create write of a record's create DTO."""
    if isinstance(dto, models.MessageCreate):
        return CreateMessage(dto)
    if isinstance(dto, models.MessageToolCallCreate):
        return CreateToolCall(dto)
    assert isinstance(dto, models.MessageReasoningCreate)
    return CreateReasoning(dto)


_UPDATE_FOR_CREATE: dict[type[BaseModel], type[BaseModel]] = {
    models.MessageCreate: models.MessageUpdate,
    models.MessageToolCallCreate: models.MessageToolCallUpdate,
    models.MessageReasoningCreate: models.MessageReasoningUpdate,
}


@functools.cache
def _extended(cls: type[_ModelT], names: frozenset[str]) -> type[_ModelT]:
    """A subclass of ``cls`` declaring ``names`` (Any, default None), cached per set.

    ``message_update_fields`` may give fields the base DTO does not declare; the store
    keeps them when its message model declares them (the seed's rule).
    """
    fields: dict[str, Any] = {name: (Any, None) for name in sorted(names)}
    return create_model(f"{cls.__name__}WithFields", __base__=cls, **fields)


def dto_with_fields(dto: _ModelT, fields: dict[str, Any]) -> _ModelT:
    """Return ``dto`` with ``fields`` set; keys its class lacks are declared on a subclass."""
    if not fields:
        return dto
    cls = type(dto)
    unknown = fields.keys() - cls.model_fields.keys()
    if not unknown:
        # Shallow and unvalidated: the fields come from the fold or from the DTO itself.
        return dto.model_copy(update=fields)
    extended: type[_ModelT] = _extended(cls, frozenset(unknown))
    return extended.model_validate({**dto.model_dump(), **fields})


def _copied(value: _T) -> _T:
    """A deep copy of ``value``, which the fold keeps changing (cheap when it is empty)."""
    if value is None:
        return value
    if not value:
        fresh: _T = type(value)()  # an empty container, but never the fold's own
        return fresh
    return copy.deepcopy(value)


def _set(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}
