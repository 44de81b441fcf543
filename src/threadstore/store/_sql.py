"""What the SQL backends share: column tables, patchable columns, models a write returns.

Both schemas give their tables the same column names, so the row loaders, the
patchable-column whitelist, the value columns of every insert (:class:`InsertColumns`:
one field-to-column table per record type, from which both backends build their
statements' column lists and parameters) and the way a create turns its DTO into the
returned model live here once.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel

from threadstore.keys import chat_deduplication_key
from threadstore.models import (
    FORMAT_VERSION,
    ChatCreate,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageReasoningUpdate,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    Run,
    utcnow,
)
from threadstore.store import ops
from threadstore.store._codec import Constructor, constructor
from threadstore.store._queries import BranchPage, require_chat_identity
from threadstore.store._records import split_create
from threadstore.store._rows import dump_json, dump_metadata, dump_parts

__all__ = [
    "CHAT_COLUMNS",
    "CHAT_FIELD_ENCODERS",
    "CHAT_INSERT",
    "CHILD_UPDATES",
    "MESSAGE_COLUMNS",
    "MESSAGE_INSERT",
    "REASONING_COLUMNS",
    "REASONING_INSERT",
    "RUN_COLUMNS",
    "RUN_INSERT",
    "TOOL_CALL_COLUMNS",
    "TOOL_CALL_INSERT",
    "UPDATABLE",
    "Encoder",
    "InsertColumns",
    "InsertPlans",
    "Kind",
    "Plan",
    "branch_page",
    "chat_values",
    "created_child",
    "created_message",
    "load_run",
    "params",
    "record_values",
    "update_value",
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
    "updated_at", "error",
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
    "error", "format_version", "created_at", "updated_at", "exclusive",
)  # fmt: skip


class Kind(enum.Enum):
    """How a column's value is encoded for the driver (each backend maps every kind)."""

    PLAIN = "plain"
    """Text (or a ``str`` enum), passed as it is."""
    INT = "int"
    DOC = "doc"
    """A JSON document already encoded (the ``extra`` of a subclass's own fields)."""
    UUID = "uuid"
    TIME = "time"
    BOOL = "bool"
    JSON = "json"
    METADATA = "metadata"
    PARTS = "parts"


Encoder = Callable[[Any], Any]
Plan = tuple[tuple[str, Encoder | None], ...]
"""Per column of an insert, its name and how its value is encoded (``None``: as it is)."""

JSON_ENCODERS: dict[Kind, Encoder] = {
    Kind.JSON: dump_json,
    Kind.METADATA: dump_metadata,
    Kind.PARTS: dump_parts,
}
"""The encoders of the JSON-valued kinds, the same on both backends."""

CHAT_FIELD_ENCODERS: dict[str, Encoder] = {
    "name": lambda name: name,
    "state": dump_json,
    "metadata": dump_metadata,
}
"""How each directly set chat field (a chat field write of ``store/_ops.py``) is encoded."""


class InsertColumns:
    """The value columns of one record type's insert, in parameter order, with their kinds.

    Statements take the column names from here and parameter ``i`` (1-based) is
    column ``i``; :meth:`params` builds the parameters from the record's values.
    """

    def __init__(self, *columns: tuple[str, Kind]) -> None:
        self.names = tuple(name for name, _ in columns)
        self.kinds = tuple(kind for _, kind in columns)
        self.listed = ", ".join(self.names)
        """The column names as an insert lists them."""

    def position(self, name: str) -> int:
        """The 1-based parameter number of column ``name``."""
        return self.names.index(name) + 1

    def plan(self, encoders: Mapping[Kind, Encoder]) -> Plan:
        """Per column, its name and its backend's encoder (``None``: passed as it is)."""
        return tuple(
            (name, encoders.get(kind)) for name, kind in zip(self.names, self.kinds, strict=True)
        )


def params(plan: Plan, values: Mapping[str, Any]) -> list[Any]:
    """The parameters of an insert planned by :meth:`InsertColumns.plan`."""
    return [
        value if encode is None or value is None else encode(value)
        for name, encode in plan
        for value in (values[name],)
    ]


_P, _U, _T, _B = Kind.PLAIN, Kind.UUID, Kind.TIME, Kind.BOOL

CHAT_INSERT = InsertColumns(
    ("chat_uuid", _U), ("user_uuid", _U), ("thread_id", _P), ("dedup_key", _P), ("name", _P),
    ("tenant_id", _P), ("app_id", _P), ("forked_from_chat_uuid", _U),
    ("forked_from_message_uuid", _U), ("state", Kind.JSON), ("metadata", Kind.METADATA),
    ("extra", Kind.DOC), ("format_version", Kind.INT), ("created_at", _T),
)  # fmt: skip
"""A chat's insert; ``updated_at`` is ``created_at``."""

MESSAGE_INSERT = InsertColumns(
    ("message_uuid", _U), ("chat_uuid", _U), ("parent_uuid", _U), ("agui_id", _P),
    ("role", _P), ("name", _P), ("content", _P), ("content_parts", Kind.PARTS),
    ("encrypted_value", _P), ("activity_type", _P), ("activity_content", Kind.JSON),
    ("status", _P), ("in_progress", _B), ("step_name", _P), ("run_id", _P),
    ("metadata", Kind.METADATA), ("extra", Kind.DOC), ("format_version", Kind.INT),
    ("created_at", _T), ("error", _P),
)  # fmt: skip
"""A message's insert; ``updated_at`` is ``created_at``, ``seq`` is assigned."""

TOOL_CALL_INSERT = InsertColumns(
    ("message_uuid", _U), ("uuid", _U), ("tool_call_id", _P), ("name", _P), ("arguments", _P),
    ("content", _P), ("result_message_id", _P), ("error", _P), ("status", _P),
    ("in_progress", _B), ("step_name", _P), ("metadata", Kind.METADATA), ("extra", Kind.DOC),
    ("format_version", Kind.INT), ("created_at", _T),
)  # fmt: skip
"""A tool call's insert; its chat and ``seq`` come from the parent message."""

REASONING_INSERT = InsertColumns(
    ("message_uuid", _U), ("uuid", _U), ("agui_id", _P), ("name", _P), ("content", _P),
    ("encrypted_value", _P), ("status", _P), ("in_progress", _B), ("step_name", _P),
    ("metadata", Kind.METADATA), ("extra", Kind.DOC), ("format_version", Kind.INT),
    ("created_at", _T),
)  # fmt: skip
"""A reasoning step's insert; its chat and ``seq`` come from the parent message."""

RUN_INSERT = InsertColumns(
    ("chat_uuid", _U), ("run_id", _P), ("thread_id", _P), ("parent_run_id", _P),
    ("status", _P), ("owner", _P), ("heartbeat_at", _T), ("error", _P),
    ("format_version", Kind.INT), ("created_at", _T), ("updated_at", _T), ("exclusive", _B),
)  # fmt: skip
"""A run's insert."""


class InsertPlans:
    """One backend's plans of every record type's insert (see :meth:`InsertColumns.plan`)."""

    def __init__(self, encoders: Mapping[Kind, Encoder]) -> None:
        self.chat = CHAT_INSERT.plan(encoders)
        self.message = MESSAGE_INSERT.plan(encoders)
        self.tool_call = TOOL_CALL_INSERT.plan(encoders)
        self.reasoning = REASONING_INSERT.plan(encoders)
        self.run = RUN_INSERT.plan(encoders)


_UPDATE_KINDS = {
    "metadata": Kind.METADATA,
    "content_parts": Kind.PARTS,
    "activity_content": Kind.JSON,
    "in_progress": Kind.BOOL,
}


def update_value(column: str, value: Any, encoders: Mapping[Kind, Encoder]) -> Any:
    """An updatable column's value as a backend's driver takes it."""
    encode = encoders.get(_UPDATE_KINDS.get(column, Kind.PLAIN))
    return value if encode is None or value is None else encode(value)


UPDATABLE: dict[str, frozenset[str]] = {
    "messages": frozenset({
        "agui_id", "content", "content_parts", "name", "encrypted_value", "activity_content",
        "status", "in_progress", "step_name", "metadata", "error",
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

CHILD_UPDATES: dict[type[ops.Op], tuple[str, type[BaseModel], tuple[str, ...]]] = {
    ops.UpdateToolCall: ("tool_calls", MessageToolCallUpdate, TOOL_CALL_COLUMNS),
    ops.UpdateReasoning: ("reasonings", MessageReasoningUpdate, REASONING_COLUMNS),
}
"""Per update of a tool call or reasoning step: its table, the model its fields split by,
and the table's columns."""


_build_message: Constructor[Message] = constructor(Message)


def chat_values(chat_data: ChatCreate) -> dict[str, Any]:
    """The values of a chat's insert (:data:`CHAT_INSERT`); ``ValueError`` without an identity."""
    user_uuid, thread_id = require_chat_identity(chat_data)
    base, extra = split_create(chat_data, ChatCreate)
    return {
        **base,
        "user_uuid": user_uuid,
        "thread_id": thread_id,
        "dedup_key": chat_deduplication_key(user_uuid, thread_id),
        "extra": extra,
        "format_version": FORMAT_VERSION,
        "created_at": utcnow(),
    }


_CREATES = (MessageCreate, MessageToolCallCreate, MessageReasoningCreate)


def record_values(data: BaseModel, created_at: datetime) -> dict[str, Any]:
    """The values of a message's, tool call's or reasoning step's insert.

    Read from the DTO's dict (the append hot path); a subclass's own fields go to ``extra``.
    """
    extra = None
    if type(data) not in _CREATES:
        base_cls = next(cls for cls in _CREATES if isinstance(data, cls))
        extra = split_create(data, base_cls)[1]
    values = {**data.__dict__, "extra": extra, "format_version": FORMAT_VERSION}
    values["created_at"] = created_at
    return values


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
        parent_uuid = UUID(parent_uuid)
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
        "error": dto["error"],
        "tool_calls": [],
        "reasonings": [],
    }
    return _build_message(fields)


def created_child(model: type[Any], data: BaseModel, *, seq: int, created_at: datetime) -> Any:
    """Return the tool call or reasoning step a create stored, with its position among siblings."""
    fields = dict(data)
    fields.update(seq=seq, created_at=created_at, updated_at=created_at)
    return model.model_validate(fields)


def load_run(row: Sequence[Any]) -> Run:
    """Build a run from a row in :data:`RUN_COLUMNS` order."""
    return Run.model_validate(dict(zip(RUN_COLUMNS, row, strict=True)))


def branch_page(page: BranchPage, args: list[Any], mark: Callable[[int], str]) -> tuple[str, str]:
    """The seq bounds of ``page`` (``AND ...``) and its ORDER BY / LIMIT, over messages ``m``.

    Their parameters are appended to ``args``; ``mark(n)`` spells the n-th placeholder
    (``?n`` or ``$n``). A ``newest_first`` page is read newest first: reverse its rows.
    """
    bounds = ""
    if page.after is not None:
        args.append(page.after)
        bounds += f" AND m.seq > {mark(len(args))}"
    if page.before is not None:
        args.append(page.before)
        bounds += f" AND m.seq < {mark(len(args))}"
    tail = " ORDER BY m.seq DESC" if page.newest_first else " ORDER BY m.seq"
    if page.limit is not None:
        args.append(page.limit)
        tail += f" LIMIT {mark(len(args))}"
    return bounds, tail
