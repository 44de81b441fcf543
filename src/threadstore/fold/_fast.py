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
from typing import TYPE_CHECKING

from ag_ui.core import (
    BaseEvent,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
)

from threadstore.codec import StreamReader
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


_DELTAS: dict[type[BaseEvent], tuple[str, int | None]] = {
    TextMessageContentEvent: ("message_id", None),
    ToolCallArgsEvent: ("tool_call_id", None),
    ReasoningMessageContentEvent: ("message_id", None),
    TextMessageChunkEvent: ("message_id", 0),
    ToolCallChunkEvent: ("tool_call_id", 1),
    ReasoningMessageChunkEvent: ("message_id", 2),
}
"""The delta events: the field naming their record, and for a chunk its reader slot."""


def fast_target(fold: RecordTable, event: BaseEvent, reader: StreamReader) -> FastTarget | None:
    """The target the deltas after ``event`` may take, just folded by the reference path.

    A chunk qualifies when it names the run of chunks ``reader`` has open (the reading
    then makes it exactly the delta of that run, and an empty one nothing).
    """
    kind = type(event)
    known = _DELTAS.get(kind)
    if known is None:
        return None
    field, slot = known
    target: str | None = getattr(event, field)
    if target is None:
        return None
    if slot is not None:
        open_ = reader.chunks[slot]
        if open_ is None or open_.id != target:
            return None
    record: FoldRecord | None
    if field == "tool_call_id":
        record = fold.tool_call(target)
        if record is None or not record.owned:
            return None
        return FastTarget(kind, field, target, record, slot is not None)
    text = kind is TextMessageContentEvent or kind is TextMessageChunkEvent
    record = fold.find(target, Role.ASSISTANT) if text else fold.reasoning(target)
    # Its next non-empty delta grows no other parts-order segment.
    if record is None or not _segment_open(fold, record, text=text):
        return None
    return FastTarget(kind, field, target, record, not text or slot is not None)


def _segment_open(fold: RecordTable, record: FoldRecord, *, text: bool) -> bool:
    """Whether the reference would grow no new segment for ``record``'s next delta."""
    if fold.parts_tail == record.key or record.subagent_run_id is not None:
        return True
    return text and record.role is not Role.ASSISTANT
