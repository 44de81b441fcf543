"""Row <-> model conversion shared by the SQL backends.

JSON-valued fields (metadata, state, content parts, activity content) are stored
as JSON text written by the binary-safe codec (:mod:`threadstore.binary_json`), so
bytes anywhere in them survive as the ``$deuzBytes`` tag; an empty ``metadata`` is
stored as NULL so the common row needs no JSON parsing on read. Rows written before
the codec hold plain JSON (and content parts' inline data as a base64 string), which
reads as it did: text without a tag is parsed as plain JSON.

Reading history is the hot path of every run, so :class:`RowLoader` builds the
stock models straight from trusted rows (rows this code wrote, in columns whose
types the schema fixes) with :func:`threadstore.store._codec.constructor` instead of
re-validating every field; a model subclass goes through full pydantic validation,
so its own validators still run.
"""

from __future__ import annotations

import json
import operator
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from enum import Enum
from typing import Any
from uuid import UUID

from pydantic import BaseModel, TypeAdapter

from threadstore import binary_json
from threadstore._steps import off_loop
from threadstore.errors import CorruptRecordError
from threadstore.models import ContentPart, Message, Reasoning, ToolCall
from threadstore.store._codec import constructor
from threadstore.store._records import ExtrasCodec

__all__ = [
    "CONTENT_PARTS",
    "EntryLoader",
    "RowLoader",
    "attach_children",
    "dump_json",
    "dump_metadata",
    "dump_parts",
    "load_parts",
]

CONTENT_PARTS: TypeAdapter[list[ContentPart]] = TypeAdapter(list[ContentPart])

_JSON_FIELDS = frozenset({"metadata", "state", "activity_content"})


def dump_json(value: Any) -> str | None:
    """Encode a JSON-valued field, bytes tagged; ``None`` stays NULL."""
    return None if value is None else binary_json.dumps(value)


def dump_metadata(value: dict[str, Any] | None) -> str | None:
    """Encode metadata, storing an empty mapping as NULL."""
    return dump_json(value) if value else None


def dump_parts(parts: Sequence[Any] | None) -> str | None:
    """Encode content parts, their bytes (inline data, metadata) tagged."""
    if parts is None:
        return None
    return binary_json.dumps(CONTENT_PARTS.dump_python(list(parts), exclude_none=False))


def load_parts(text: str | bytes) -> list[ContentPart]:
    """Decode stored content parts: tagged bytes, or (older rows) inline data in base64."""
    if binary_json.may_hold_tags(text):
        return CONTENT_PARTS.validate_python(binary_json.loads(text))
    return CONTENT_PARTS.validate_json(text)


def _plain(annotation: Any) -> Any:
    """Strip ``X | None`` down to ``X``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


_TrustedLoad = Callable[[Iterable[Sequence[Any]], dict[Any, Any]], list[Any]]


def _trusted_loader(model: type[BaseModel], columns: Sequence[str]) -> _TrustedLoad:
    """The loop that builds ``model`` instances from trusted rows.

    Each row's values are picked in the model's field order and converted where the
    stored form differs: ids and times parsed once per distinct text (a history repeats
    the chat id, each parent is the previous message's id, created == updated), enums
    looked up, the rest (booleans, JSON) by a function; fields with no column (a
    message's nested lists, which come last) get fresh defaults.
    """
    position = {name: index for index, name in enumerate(columns)}
    names: list[str] = []
    picks: list[int] = []
    parsed: list[tuple[int, Callable[[str], Any]]] = []
    members: list[tuple[int, dict[Any, Any]]] = []
    converts: list[tuple[int, Callable[[Any], Any]]] = []
    defaults: list[tuple[str, Callable[[], Any]]] = []
    for name, field in model.model_fields.items():
        if name not in position:
            if field.default_factory is not None:
                defaults.append((name, typing.cast(Callable[[], Any], field.default_factory)))
            continue
        if defaults:
            raise TypeError(f"{model.__name__}: fields without a column must come last")
        at = len(names)
        kind = _plain(field.annotation)
        if kind is UUID:
            parsed.append((at, UUID))
        elif kind is datetime:
            parsed.append((at, datetime.fromisoformat))
        elif isinstance(kind, type) and issubclass(kind, Enum):
            members.append((at, {member.value: member for member in kind}))
        elif (convert := _converter(name, kind)) is not None:
            converts.append((at, convert))
        names.append(name)
        picks.append(position[name])
    build = constructor(model)
    pick = operator.itemgetter(*picks)

    def load(rows: Iterable[Sequence[Any]], memo: dict[Any, Any]) -> list[Any]:
        get = memo.get
        built = []
        for row in rows:
            values = list(pick(row))
            for index, parse in parsed:
                value = values[index]
                if value.__class__ is str:
                    known = get(value)
                    if known is None:
                        known = memo[value] = parse(value)
                    values[index] = known
            for index, lookup in members:
                values[index] = lookup[values[index]]
            for index, convert in converts:
                values[index] = convert(values[index])
            fields = dict(zip(names, values))  # noqa: B905 - equal lengths by construction
            for name, factory in defaults:
                fields[name] = factory()
            built.append(build(fields))
        return built

    return load


def _converter(name: str, kind: Any) -> Callable[[Any], Any] | None:
    """How a column's stored value becomes the field's value (``None``: as it is)."""
    if kind is bool:
        return bool
    if name == "content_parts":
        return _parts
    if name == "metadata":
        return _metadata
    if name in _JSON_FIELDS:
        return _json
    return None


def _parts(value: Any) -> Any:
    return load_parts(value) if value.__class__ is str else value


def _metadata(value: Any) -> Any:
    return {} if value is None else _json(value)


def _json(value: Any) -> Any:
    if value.__class__ is not str:
        return value
    # The tag check first: most rows hold no bytes and skip the decoding walk.
    return binary_json.loads(value) if "$deuz" in value else json.loads(value)


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
            _trusted_loader(model, self.columns) if model is base and not codec.names else None
        )

    def load(self, rows: Iterable[Sequence[Any]], memo: dict[Any, Any] | None = None) -> list[Any]:
        """Build one model per row; a row that cannot be read raises :class:`CorruptRecordError`.

        ``memo``: ids and times parsed already, by their text (shared by the loads of one
        history, where children repeat their message's id).
        """
        try:
            return self._load(rows, {} if memo is None else memo)
        except (ValueError, TypeError, KeyError) as exc:  # JSON, validation, unknown enum value
            raise self._corrupt(rows, exc) from exc

    def _load(self, rows: Iterable[Sequence[Any]], memo: dict[Any, Any]) -> list[Any]:
        if self._trusted is not None:
            return self._trusted(rows, memo)
        built: list[Any] = self._adapter.validate_python([self._record(row) for row in rows])
        return built

    def _corrupt(self, rows: Iterable[Sequence[Any]], exc: Exception) -> CorruptRecordError:
        """The error naming the first row that does not load (the rows loaded are a list)."""
        bad: Sequence[Any] | None = None
        for row in rows if isinstance(rows, Sequence) else ():
            try:
                self._load([row], {})
            except (ValueError, TypeError, KeyError):
                bad = row
                break
        named = dict(zip(self.columns, bad, strict=True)) if bad is not None else {}
        kind = self.model.__name__
        record_id = named.get("uuid") or named.get("message_uuid") or named.get("chat_uuid")
        return CorruptRecordError(
            kind,
            record_id,
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            chat_uuid=named.get("chat_uuid"),
            message_uuid=named.get("message_uuid"),
        )

    def column(self, name: str) -> int:
        """Where column ``name`` stands in a row."""
        return self.columns.index(name)

    def _record(self, row: Sequence[Any]) -> dict[str, Any]:
        record = dict(zip(self.columns, row, strict=True))
        for name in _JSON_FIELDS.intersection(record):
            raw = record[name]
            if raw is None:
                if name == "metadata":
                    record[name] = {}
            elif isinstance(raw, str):
                record[name] = binary_json.loads(raw)
        parts = record.get("content_parts")
        if isinstance(parts, str):
            record["content_parts"] = load_parts(parts)
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


async def attach_rows(
    messages: Sequence[Message],
    tool_calls: RowLoader,
    tool_call_rows: Sequence[Sequence[Any]],
    reasonings: RowLoader,
    reasoning_rows: Sequence[Sequence[Any]],
) -> None:
    """Build tool calls and reasoning steps from their rows and attach them to ``messages``.

    Off the event loop for a long history (:func:`~threadstore._steps.off_loop`).
    """

    def build() -> None:
        attach_children(messages, tool_calls.load(tool_call_rows), reasonings.load(reasoning_rows))

    await off_loop(messages, build)


class EntryLoader:
    """A history's compact entries (``store/_history.py``) from rows, and models from them.

    An entry is a message's row with its tool calls' and reasoning steps' rows: tuples
    of strings, numbers and times, which the cyclic collector does not track.
    """

    def __init__(self, messages: RowLoader, tool_calls: RowLoader, reasonings: RowLoader) -> None:
        self.messages, self.tool_calls, self.reasonings = messages, tool_calls, reasonings
        self._uuid = messages.column("message_uuid")
        self._tool_parent = tool_calls.column("message_uuid")
        self._reasoning_parent = reasonings.column("message_uuid")
        self._times = tuple(
            tuple(i for i, name in enumerate(loader.columns) if name.endswith("_at"))
            for loader in (messages, tool_calls, reasonings)
        )

    def entries(
        self,
        rows: Iterable[Sequence[Any]],
        tool_rows: Iterable[Sequence[Any]],
        reasoning_rows: Iterable[Sequence[Any]],
    ) -> list[tuple[Any, ...]]:
        """One entry per message row, in order, holding the child rows that name it."""
        children: dict[Any, tuple[list[Any], list[Any]]] = {}
        memo: dict[str, datetime] = {}
        message_times, tool_times, reasoning_times = self._times
        for child_rows, slot, parent, times in (
            (tool_rows, 0, self._tool_parent, tool_times),
            (reasoning_rows, 1, self._reasoning_parent, reasoning_times),
        ):
            for row in child_rows:
                children.setdefault(row[parent], ([], []))[slot].append(_compact(row, times, memo))
        none: tuple[list[Any], list[Any]] = ([], [])
        out = []
        for row in rows:
            tools, steps = children.get(row[self._uuid], none)
            out.append((_compact(row, message_times, memo), tuple(tools), tuple(steps)))
        return out

    def build(self, entries: Sequence[tuple[Any, ...]]) -> list[Message]:
        """New models of ``entries``, one message per entry, with its children attached."""
        memo: dict[Any, Any] = {}
        messages: list[Message] = self.messages.load([entry[0] for entry in entries], memo)
        tools = [row for entry in entries for row in entry[1]]
        steps = [row for entry in entries for row in entry[2]]
        if tools or steps:
            attach_children(
                messages, self.tool_calls.load(tools, memo), self.reasonings.load(steps, memo)
            )
        return messages


def _compact(
    row: Sequence[Any], times: Sequence[int], memo: dict[str, datetime]
) -> tuple[Any, ...]:
    """``row`` as a tuple the collector does not track: uuids as text (a driver's own
    uuid objects are tracked), times parsed once here rather than at every build
    (a ``datetime`` is not tracked either)."""
    values = [str(value) if isinstance(value, UUID) else value for value in row]
    for index in times:
        value = values[index]
        if value.__class__ is str:
            known = memo.get(value)
            if known is None:
                known = memo[value] = datetime.fromisoformat(value)
            values[index] = known
    return tuple(values)
