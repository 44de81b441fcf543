"""What the SQL backends share: column lists, patchable columns, models a write returns.

Both schemas give their tables the same column names, so the row loaders, the
patchable-column whitelist and the way a create turns its DTO into the returned
model live here once.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from threadstore.models import FORMAT_VERSION, Message, MessageCreate, Run
from threadstore.store.rows import parse_uuid

__all__ = [
    "CHAT_COLUMNS",
    "MESSAGE_COLUMNS",
    "REASONING_COLUMNS",
    "RUN_COLUMNS",
    "TOOL_CALL_COLUMNS",
    "UPDATABLE",
    "created_child",
    "created_message",
    "load_run",
]

CHAT_COLUMNS = (
    "chat_uuid", "user_uuid", "thread_id", "dedup_key", "name", "tenant_id", "app_id",
    "active_leaf_uuid", "forked_from_chat_uuid", "forked_from_message_uuid", "state",
    "metadata", "extra", "format_version", "created_at", "updated_at",
)  # fmt: skip

MESSAGE_COLUMNS = (
    "seq", "message_uuid", "chat_uuid", "parent_uuid", "agui_id", "role", "name", "content",
    "content_parts", "encrypted_value", "activity_type", "activity_content", "status",
    "in_progress", "step_name", "run_id", "metadata", "extra", "format_version", "created_at",
    "updated_at",
)  # fmt: skip

TOOL_CALL_COLUMNS = (
    "uuid", "message_uuid", "tool_call_id", "name", "arguments", "content", "result_message_id",
    "error", "status", "in_progress", "step_name", "seq", "metadata", "extra", "format_version",
    "created_at", "updated_at",
)  # fmt: skip

REASONING_COLUMNS = (
    "uuid", "message_uuid", "agui_id", "name", "content", "encrypted_value", "status",
    "in_progress", "step_name", "seq", "metadata", "extra", "format_version", "created_at",
    "updated_at",
)  # fmt: skip

RUN_COLUMNS = (
    "chat_uuid", "run_id", "thread_id", "parent_run_id", "status", "owner", "heartbeat_at",
    "error", "format_version", "created_at", "updated_at",
)  # fmt: skip

UPDATABLE: dict[str, frozenset[str]] = {
    "messages": frozenset({
        "content", "content_parts", "name", "encrypted_value", "activity_content", "status",
        "in_progress", "step_name", "metadata",
    }),
    "tool_calls": frozenset({
        "name", "arguments", "content", "result_message_id", "error", "status", "in_progress",
        "step_name", "metadata",
    }),
    "reasonings": frozenset({
        "name", "content", "encrypted_value", "status", "in_progress", "step_name", "metadata",
    }),
}  # fmt: skip
"""The columns an update DTO may set, per table; column names are only ever taken from here."""


_MESSAGE_FIELDS = frozenset(Message.model_fields)
_new = object.__new__
_set = object.__setattr__


def created_message(
    model: type[Message],
    data: MessageCreate,
    *,
    seq: int,
    parent_uuid: Any,
    created_at: datetime,
) -> Message:
    """Return the message a create stored: the DTO's fields plus what the database assigned."""
    if model is Message and type(data) is MessageCreate:
        return _stock_message(data, seq=seq, parent_uuid=parent_uuid, created_at=created_at)
    fields = {name: value for name, value in data if name != "created_at"}
    fields.update(parent_uuid=parent_uuid, seq=seq, created_at=created_at, updated_at=created_at)
    return model.model_validate(fields)


def _stock_message(
    data: MessageCreate, *, seq: int, parent_uuid: Any, created_at: datetime
) -> Message:
    # Every value comes from an already validated DTO or from the database, so the
    # message is assembled without validating it again (this is on every append).
    # Containers are copied: the caller's DTO and the returned message stay independent.
    dto = data.__dict__
    if parent_uuid.__class__ is str:
        parent_uuid = parse_uuid(parent_uuid)
    parts, activity, metadata = dto["content_parts"], dto["activity_content"], dto["metadata"]
    fields = {
        "format_version": FORMAT_VERSION,
        "message_uuid": dto["message_uuid"],
        "chat_uuid": dto["chat_uuid"],
        "parent_uuid": parent_uuid,
        "agui_id": dto["agui_id"],
        "role": dto["role"],
        "name": dto["name"],
        "content": dto["content"],
        "content_parts": None if parts is None else copy.deepcopy(parts),
        "encrypted_value": dto["encrypted_value"],
        "activity_type": dto["activity_type"],
        "activity_content": None if activity is None else copy.deepcopy(activity),
        "status": dto["status"],
        "in_progress": dto["in_progress"],
        "step_name": dto["step_name"],
        "run_id": dto["run_id"],
        "seq": seq,
        "metadata": copy.deepcopy(metadata) if metadata else {},
        "created_at": created_at,
        "updated_at": created_at,
        "tool_calls": [],
        "reasonings": [],
    }
    message = _new(Message)
    _set(message, "__dict__", fields)
    _set(message, "__pydantic_fields_set__", set(_MESSAGE_FIELDS))
    _set(message, "__pydantic_extra__", None)
    _set(message, "__pydantic_private__", None)
    message_: Message = message
    return message_


def created_child(model: type[Any], data: BaseModel, *, seq: int, created_at: datetime) -> Any:
    """Return the tool call or reasoning step a create stored, with its position among siblings."""
    fields = dict(data)
    fields.update(seq=seq, created_at=created_at, updated_at=created_at)
    return model.model_validate(fields)


def load_run(row: Sequence[Any]) -> Run:
    """Build a run from a row in :data:`RUN_COLUMNS` order."""
    return Run.model_validate(dict(zip(RUN_COLUMNS, row, strict=True)))
