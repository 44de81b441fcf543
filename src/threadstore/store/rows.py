"""Row <-> model conversion shared by the SQL backends.

JSON-valued fields (metadata, state, content parts, activity content) are stored
as JSON text; an empty ``metadata`` is stored as NULL so the common row needs no
JSON parsing on read. Content parts go through one TypeAdapter so their bytes
travel as base64.

Reading history is the hot path of every run, so :class:`RowLoader` builds the
stock models straight from trusted rows (rows this code wrote, in columns whose
types the schema fixes) instead of re-validating every field; a model subclass
goes through full pydantic validation, so its own validators still run.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from enum import Enum
from typing import Any
from uuid import UUID, SafeUUID

from pydantic import BaseModel, TypeAdapter

from threadstore.models import ContentPart, Message, Reasoning, ToolCall
from threadstore.store.records import ExtrasCodec

__all__ = [
    "CONTENT_PARTS",
    "RowLoader",
    "attach_children",
    "dump_json",
    "dump_metadata",
    "dump_parts",
]

CONTENT_PARTS: TypeAdapter[list[ContentPart]] = TypeAdapter(list[ContentPart])

_JSON_FIELDS = frozenset({"metadata", "state", "activity_content"})


def dump_json(value: Any) -> str | None:
    """Encode a JSON-valued field; ``None`` stays NULL."""
    return None if value is None else json.dumps(value, separators=(",", ":"))


def dump_metadata(value: dict[str, Any] | None) -> str | None:
    """Encode metadata, storing an empty mapping as NULL."""
    return dump_json(value) if value else None


def dump_parts(parts: Sequence[Any] | None) -> str | None:
    """Encode content parts (bytes as base64)."""
    return None if parts is None else CONTENT_PARTS.dump_json(list(parts)).decode()


def _fast_uuid(
    text: str,
    _new: Any = object.__new__,
    _set: Any = object.__setattr__,
    _unknown: SafeUUID = SafeUUID.unknown,
) -> UUID:
    # uuid.UUID(text) re-validates its input; rows hold canonical UUID text already.
    value = _new(UUID)
    _set(value, "int", int(text.replace("-", ""), 16))
    _set(value, "is_safe", _unknown)
    return typing.cast(UUID, value)


def _plain(annotation: Any) -> Any:
    """Strip ``X | None`` down to ``X``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


class RowLoader:
    """Turns rows (tuples in ``columns`` order) into models of one class."""

    def __init__(
        self,
        model: type[BaseModel],
        base: type[BaseModel],
        columns: Sequence[str],
        codec: ExtrasCodec,
    ) -> None:
        self.model = model
        self.columns = tuple(columns)
        self.codec = codec
        self._adapter: TypeAdapter[list[Any]] = TypeAdapter(list[model])  # type: ignore[valid-type]
        self._fast = model is base and not codec.names
        self._uuid_cols: list[str] = []
        self._time_cols: list[str] = []
        self._enum_cols: list[tuple[str, dict[Any, Any]]] = []
        self._bool_cols: list[str] = []
        for name in self.columns:
            field = model.model_fields.get(name)
            if field is None:
                continue
            kind = _plain(field.annotation)
            if kind is UUID:
                self._uuid_cols.append(name)
            elif kind is datetime:
                self._time_cols.append(name)
            elif isinstance(kind, type) and issubclass(kind, Enum):
                self._enum_cols.append((name, {m.value: m for m in kind}))
            elif kind is bool:
                self._bool_cols.append(name)
        # Fields with no column (e.g. a message's nested lists) get fresh defaults.
        self._defaults: list[tuple[str, Callable[[], Any]]] = [
            (name, typing.cast(Callable[[], Any], field.default_factory))
            for name, field in model.model_fields.items()
            if name not in self.columns and field.default_factory is not None
        ]
        self._fields_set = frozenset(model.model_fields)

    def load(self, rows: Iterable[Sequence[Any]]) -> list[Any]:
        """Build one model per row."""
        records = [self._record(row) for row in rows]
        if not self._fast:
            return self._adapter.validate_python(records)
        # One history repeats the same ids and stamps (chat id, each parent is the
        # previous message's id, created == updated), so parse each text once.
        memo: dict[str, Any] = {}
        return [self._build(record, memo) for record in records]

    def _record(self, row: Sequence[Any]) -> dict[str, Any]:
        record = dict(zip(self.columns, row, strict=True))
        for name in _JSON_FIELDS.intersection(record):
            raw = record[name]
            if raw is None:
                if name == "metadata":
                    record[name] = {}
            elif isinstance(raw, str):
                record[name] = json.loads(raw)
        parts = record.get("content_parts")
        if isinstance(parts, str):
            record["content_parts"] = CONTENT_PARTS.validate_json(parts)
        extra = record.pop("extra", None)
        if extra is not None and self.codec.names:
            record.update(self.codec.decode(extra))
        return record

    def _build(self, record: dict[str, Any], memo: dict[str, Any]) -> Any:
        for name in self._uuid_cols:
            value = record[name]
            if value.__class__ is str:
                parsed = memo.get(value)
                if parsed is None:
                    parsed = memo[value] = _fast_uuid(value)
                record[name] = parsed
        for name in self._time_cols:
            value = record[name]
            if value.__class__ is str:
                parsed = memo.get(value)
                if parsed is None:
                    parsed = memo[value] = datetime.fromisoformat(value)
                record[name] = parsed
        for name, members in self._enum_cols:
            record[name] = members[record[name]]
        for name in self._bool_cols:
            record[name] = bool(record[name])
        for name, factory in self._defaults:
            record[name] = factory()
        instance = self.model.__new__(self.model)
        object.__setattr__(instance, "__dict__", record)
        object.__setattr__(instance, "__pydantic_fields_set__", set(self._fields_set))
        object.__setattr__(instance, "__pydantic_extra__", None)
        object.__setattr__(instance, "__pydantic_private__", None)
        return instance


def attach_children(
    messages: Sequence[Message],
    tool_calls: Iterable[ToolCall],
    reasonings: Iterable[Reasoning],
) -> None:
    """Attach tool calls and reasoning steps (in ``seq`` order) to their messages in place."""
    by_uuid = {m.message_uuid: m for m in messages}
    for tool_call in sorted(tool_calls, key=lambda t: t.seq):
        parent = by_uuid.get(tool_call.message_uuid)
        if parent is not None:
            parent.tool_calls.append(tool_call)
    for reasoning in sorted(reasonings, key=lambda r: r.seq):
        parent = by_uuid.get(reasoning.message_uuid)
        if parent is not None:
            parent.reasonings.append(reasoning)
