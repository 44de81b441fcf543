"""The fold's one fast path: the next content delta of the record the last delta extended.

Most of a stream is text, tool argument and reasoning deltas, each for the record the
one before it extended. After :meth:`~threadstore.fold.ConversationFold.apply_reference`
folds such a delta without opening, closing or warning, :func:`fast_target` says how the
next delta of the same class and id changes the fold — its text appended, its versions
bumped, its key marked dirty, nothing else — so ``apply`` does just that. Any other
event goes the reference way and clears the target. The tests fold streams both ways and
compare.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ag_ui.core import (
    BaseEvent,
    ReasoningMessageContentEvent,
    TextMessageContentEvent,
    ToolCallArgsEvent,
)

from threadstore.fold._records import FoldRecord
from threadstore.models import Role

if TYPE_CHECKING:
    from threadstore.fold._table import RecordTable

__all__ = ["FastTarget", "fast_target"]


@dataclass(frozen=True, slots=True)
class FastTarget:
    """The deltas ``apply`` may fold by appending: of class ``kind`` naming ``id``."""

    kind: type[BaseEvent]
    field: str
    id: str
    record: FoldRecord
    skip_empty: bool
    """An empty delta changes nothing (the reference ignores it: no version bump)."""


def fast_target(fold: RecordTable, event: BaseEvent) -> FastTarget | None:
    """The target the deltas after ``event`` may take, just folded by the reference path."""
    kind = type(event)
    record: FoldRecord | None
    event_any: Any = event
    if kind is TextMessageContentEvent:
        record = fold.find(event_any.message_id, Role.ASSISTANT)
        # Its next non-empty delta grows no other parts-order segment.
        if record is None or not _segment_open(fold, record, text=True):
            return None
        return FastTarget(kind, "message_id", event_any.message_id, record, False)
    if kind is ToolCallArgsEvent:
        record = fold.tool_call(event_any.tool_call_id)
        if record is None or not record.owned:
            return None
        return FastTarget(kind, "tool_call_id", event_any.tool_call_id, record, False)
    if kind is ReasoningMessageContentEvent:
        record = fold.reasoning(event_any.message_id)
        if record is None or not _segment_open(fold, record, text=False):
            return None
        return FastTarget(kind, "message_id", event_any.message_id, record, True)
    return None


def _segment_open(fold: RecordTable, record: FoldRecord, *, text: bool) -> bool:
    """Whether the reference would grow no new segment for ``record``'s next delta."""
    if fold.parts_tail == record.key or record.subagent_run_id is not None:
        return True
    return text and record.role is not Role.ASSISTANT
