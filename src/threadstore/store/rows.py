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
    "parse_uuid",
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


def parse_uuid(
    text: str,
    _new: Any = object.__new__,
    _set: Any = object.__setattr__,
    _unknown: SafeUUID = SafeUUID.unknown,
) -> UUID:
    """Parse canonical UUID text that this code wrote (no re-validation, unlike ``UUID()``)."""
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


def _memo_uuid(value: Any, memo: dict[Any, Any]) -> Any:
    parsed = parse_uuid(value) if value.__class__ is str else value
    memo[value] = parsed
    return parsed


def _memo_time(value: Any, memo: dict[Any, Any]) -> Any:
    parsed = datetime.fromisoformat(value) if value.__class__ is str else value
    memo[value] = parsed
    return parsed


_TrustedLoad = Callable[[Iterable[Sequence[Any]], dict[Any, Any]], list[Any]]


def _compile_trusted(model: type[BaseModel], columns: Sequence[str]) -> _TrustedLoad:
    """Generate the loop that builds ``model`` instances from trusted rows.

    Each row becomes one dict display with every column's conversion written
    inline, which costs about half of a generic per-column loop; only field names
    (identifiers, checked) and column positions are written into the source.
    """
    position = {name: index for index, name in enumerate(columns)}
    env: dict[str, Any] = {
        "_uuid": _memo_uuid,
        "_time": _memo_time,
        "_loads": json.loads,
        "_parts": CONTENT_PARTS.validate_json,
        "_new": object.__new__,
        "_set": object.__setattr__,
        "_model": model,
        "_fields": frozenset(model.model_fields),
    }
    entries: list[str] = []
    for name, field in model.model_fields.items():
        if not name.isidentifier():
            raise TypeError(f"{model.__name__}.{name} is not an identifier")
        if name not in position:
            # Fields with no column (e.g. a message's nested lists) get fresh defaults.
            if field.default_factory is not None:
                env[f"_new_{name}"] = field.default_factory
                entries.append(f"{name!r}: _new_{name}()")
            continue
        value = f"row[{position[name]}]"
        kind = _plain(field.annotation)
        if kind is UUID:
            expr = f"get({value}) or _uuid({value}, memo)"
        elif kind is datetime:
            expr = f"get({value}) or _time({value}, memo)"
        elif isinstance(kind, type) and issubclass(kind, Enum):
            env[f"_members_{name}"] = {member.value: member for member in kind}
            expr = f"_members_{name}[{value}]"
        elif kind is bool:
            expr = f"bool({value})"
        elif name == "content_parts":
            expr = f"_parts({value}) if {value}.__class__ is str else {value}"
        elif name in _JSON_FIELDS:
            empty = "{}" if name == "metadata" else "None"
            expr = f"{empty} if {value} is None else _loads({value}) if {value}.__class__ is str"
            expr += f" else {value}"
        else:
            expr = value
        entries.append(f"{name!r}: ({expr})")
    source = "\n".join(
        [
            "def load(rows, memo):",
            "    get = memo.get",
            "    built = []",
            "    for row in rows:",
            "        instance = _new(_model)",
            "        _set(instance, '__dict__', {" + ", ".join(entries) + "})",
            "        _set(instance, '__pydantic_fields_set__', set(_fields))",
            "        _set(instance, '__pydantic_extra__', None)",
            "        _set(instance, '__pydantic_private__', None)",
            "        built.append(instance)",
            "    return built",
        ]
    )
    exec(compile(source, f"<row loader for {model.__name__}>", "exec"), env)
    return typing.cast(_TrustedLoad, env["load"])


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
        self._trusted = (
            _compile_trusted(model, self.columns) if model is base and not codec.names else None
        )

    def load(self, rows: Iterable[Sequence[Any]]) -> list[Any]:
        """Build one model per row."""
        if self._trusted is not None:
            # One history repeats the same ids and stamps (chat id, each parent is the
            # previous message's id, created == updated), so parse each value once.
            return self._trusted(rows, {})
        return self._adapter.validate_python([self._record(row) for row in rows])

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


def attach_children(
    messages: Sequence[Message],
    tool_calls: Iterable[ToolCall],
    reasonings: Iterable[Reasoning],
) -> None:
    """Attach tool calls and reasoning steps (in ``seq`` order) to their messages in place."""
    tool_calls = sorted(tool_calls, key=lambda t: t.seq)
    reasonings = sorted(reasonings, key=lambda r: r.seq)
    if not tool_calls and not reasonings:
        # Most histories are plain text: skip indexing every message by its id.
        return
    by_uuid = {m.message_uuid: m for m in messages}
    for tool_call in tool_calls:
        parent = by_uuid.get(tool_call.message_uuid)
        if parent is not None:
            parent.tool_calls.append(tool_call)
    for reasoning in reasonings:
        parent = by_uuid.get(reasoning.message_uuid)
        if parent is not None:
            parent.reasonings.append(reasoning)
