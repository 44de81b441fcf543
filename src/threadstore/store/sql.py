"""What the SQL backends share: column lists, patchable columns, models a write returns.

Both schemas give their tables the same column names, so the row loaders, the
patchable-column whitelist and the way a create turns its DTO into the returned
model live here once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from threadstore.models import Message, MessageCreate, Run

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


def created_message(
    model: type[Message],
    data: MessageCreate,
    *,
    seq: int,
    parent_uuid: Any,
    created_at: datetime,
) -> Message:
    """Return the message a create stored: the DTO's fields plus what the database assigned."""
    fields = {name: value for name, value in data if name != "created_at"}
    fields.update(parent_uuid=parent_uuid, seq=seq, created_at=created_at, updated_at=created_at)
    return model.model_validate(fields)


def created_child(model: type[Any], data: BaseModel, *, seq: int, created_at: datetime) -> Any:
    """Return the tool call or reasoning step a create stored, with its position among siblings."""
    fields = dict(data)
    fields.update(seq=seq, created_at=created_at, updated_at=created_at)
    return model.model_validate(fields)


def load_run(row: Sequence[Any]) -> Run:
    """Build a run from a row in :data:`RUN_COLUMNS` order."""
    return Run.model_validate(dict(zip(RUN_COLUMNS, row, strict=True)))
