"""The one fast path: a run of content deltas for one open record, folded at once.

Most of a stream is text, tool argument and reasoning deltas. :func:`fold_deltas`
folds ``events[start]`` and the deltas after it for the same record by looking the
record up once and appending their text together, exactly as
:meth:`~threadstore.fold.ConversationFold.apply` of each would (the same text,
versions, dirty set and timestamp). It declines (returns 0, nothing changed) any event
that would open, close or warn: ``apply`` is the reference, and the tests fold streams
both ways and compare.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ag_ui.core import (
    BaseEvent,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
)

from threadstore.fold._records import FoldRecord
from threadstore.fold._table import RecordTable
from threadstore.models import Role

__all__ = ["DELTA_EVENTS", "fold_deltas"]


@dataclass(frozen=True, slots=True)
class _Rule:
    """How one delta class extends its record, as ``apply`` folds it."""

    field: str
    """The event field naming the record."""
    prefix: str | None
    """Key prefix of the record a content event names; None for a chunk event."""
    slot: str | None
    """For a chunk event: the chunk slot holding the record it extends."""
    owned_only: bool
    """Only a record this run owns grows (a stored call's arguments are not ours)."""
    skip_empty: bool
    """An empty delta changes nothing (``apply`` ignores it: no version bump)."""
    segment: str | None
    """The parts-order segment kind the record's deltas grow (None: arguments)."""


_RULES: dict[type[BaseEvent], _Rule] = {
    TextMessageContentEvent: _Rule("message_id", "m:", None, False, False, "text"),
    ToolCallArgsEvent: _Rule("tool_call_id", "t:", None, True, False, None),
    ReasoningMessageContentEvent: _Rule("message_id", "r:", None, False, True, "reasoning"),
    TextMessageChunkEvent: _Rule("message_id", None, "text_chunk", False, True, "text"),
    ToolCallChunkEvent: _Rule("tool_call_id", None, "tool_chunk", True, True, None),
    ReasoningMessageChunkEvent: _Rule(
        "message_id", None, "reasoning_chunk", False, True, "reasoning"
    ),
}

DELTA_EVENTS: frozenset[type[BaseEvent]] = frozenset(_RULES)
"""The event classes :func:`fold_deltas` may take (exact classes, not subclasses)."""

_REASONING, _ACTIVITY = Role.REASONING, Role.ACTIVITY


def _target(fold: RecordTable, rule: _Rule, event: Any) -> FoldRecord | None:
    """The open record ``event`` only extends through ``apply``, or None if it does more."""
    given: str | None = getattr(event, rule.field)
    if rule.slot is None:
        if fold.text_chunk or fold.tool_chunk or fold.reasoning_chunk:
            return None  # apply would close that chunk run first
        if rule.prefix != "m:":
            return fold.records.get(f"{rule.prefix}{given}")
        # A text delta extends only a text-family message, found as ``find`` finds it.
        record = fold.find(str(given), Role.ASSISTANT)
        return record
    key = getattr(fold, rule.slot)
    record = fold.records.get(key) if key else None
    if record is None or (given is not None and record.agui_id != given):
        return None
    if rule.slot == "text_chunk" and event.name is not None and record.name is None:
        return None  # apply names the message: a change beyond the text
    return record


def fold_deltas(fold: RecordTable, events: Sequence[BaseEvent], start: int = 0) -> int:
    """Fold ``events[start]`` and the content deltas after it for the same record at once.

    Returns how many events it folded; 0 when ``events[start]`` needs ``apply``. A
    chunk event is folded alone.
    """
    first: Any = events[start]
    kind = type(first)
    rule = _RULES.get(kind)
    if rule is None:
        return 0
    record = _target(fold, rule, first)
    if record is None:
        return 0
    end = start + 1
    if rule.slot is None:
        target = getattr(first, rule.field)
        field, count = rule.field, len(events)
        while end < count:
            follower = events[end]
            if type(follower) is not kind or getattr(follower, field) != target:
                break
            end += 1
    fold.current_event_timestamp = events[end - 1].timestamp
    if rule.owned_only and not record.owned:
        return end - start
    deltas: list[str] = [event.delta for event in events[start:end]]  # type: ignore[attr-defined]
    if rule.skip_empty:
        deltas = [delta for delta in deltas if delta]
    if deltas:
        if rule.segment is not None and fold.parts_tail != record.key and any(deltas):
            fold.grow_segment(rule.segment, record)  # as apply does before its first delta
        record.text.extend(deltas)
        record.version += len(deltas)
        record.content_version += len(deltas)
        fold.dirty.add(record.key)
    return end - start
