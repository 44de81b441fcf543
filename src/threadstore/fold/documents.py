"""JSON documents a run keeps: the AG-UI state (STATE_*) and activities (ACTIVITY_*).

A snapshot replaces the document; a delta applies an RFC 6902 patch all-or-nothing,
and a patch that does not apply is skipped with a warning, keeping the last good one.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import jsonpatch
from ag_ui.core import (
    ActivityDeltaEvent,
    ActivitySnapshotEvent,
    BaseEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
)
from pydantic import BaseModel

from threadstore.fold.records import FoldRecord
from threadstore.fold.table import RecordTable
from threadstore.models import Role

__all__ = ["DocumentFolding", "apply_json_patch"]

_ATOMIC_PATCH = "atomic" in inspect.signature(jsonpatch.apply_patch).parameters


def apply_json_patch(document: Any, operations: Sequence[Any]) -> Any:
    """Apply an RFC 6902 patch all-or-nothing and return the result; raise if it does not apply.

    The document is patched in place when the installed ``jsonpatch`` can undo a failed
    patch (so a delta costs O(patch), not O(document)); otherwise a patched copy is returned.
    """
    ops = [op.model_dump(by_alias=True) if isinstance(op, BaseModel) else op for op in operations]
    if _ATOMIC_PATCH:
        return jsonpatch.apply_patch(document, ops, in_place=True, atomic=True)
    return jsonpatch.apply_patch(document, ops)


class DocumentFolding(RecordTable):
    """Folds the run's AG-UI state and its activity messages."""

    def _on_state_snapshot(self, event: StateSnapshotEvent) -> None:
        self.state = copy.deepcopy(event.snapshot)
        self.state_version += 1

    def _on_state_delta(self, event: StateDeltaEvent) -> None:
        try:
            self.state = apply_json_patch(self.state, event.delta)
        except Exception as exc:  # any patch failure: skip it, keep the last good state
            self.warn(f"STATE_DELTA did not apply ({exc}); skipped")
            return
        self.state_version += 1

    def _activity(self, message_id: str, activity_type: str, event: BaseEvent) -> FoldRecord:
        record, opened = self.message_for(message_id, Role.ACTIVITY, event)
        if opened:
            record.activity_type = activity_type
            record.activity_content = {}
            if record.subagent_run_id is None:
                self.add_part(record, {"type": "data"})
        return record

    def _on_activity_snapshot(self, event: ActivitySnapshotEvent) -> None:
        existed = self.find(event.message_id, Role.ACTIVITY) is not None
        record = self._activity(event.message_id, event.activity_type, event)
        if existed and event.replace is False:
            return
        record.activity_content = copy.deepcopy(event.content)
        self.touch(record, content=True)

    def _on_activity_delta(self, event: ActivityDeltaEvent) -> None:
        if self.find(event.message_id, Role.ACTIVITY) is None:
            self.warn(f"ACTIVITY_DELTA for unknown activity {event.message_id!r}; it was opened")
        record = self._activity(event.message_id, event.activity_type, event)
        try:
            record.activity_content = apply_json_patch(record.activity_content or {}, event.patch)
        except Exception as exc:  # any patch failure: skip it, keep the last good content
            self.warn(f"ACTIVITY_DELTA for {event.message_id!r} did not apply ({exc}); skipped")
            return
        self.touch(record, content=True)

    DOCUMENT_HANDLERS: ClassVar[dict[str, Callable[[Any, Any], None]]] = {
        "STATE_SNAPSHOT": _on_state_snapshot,
        "STATE_DELTA": _on_state_delta,
        "ACTIVITY_SNAPSHOT": _on_activity_snapshot,
        "ACTIVITY_DELTA": _on_activity_delta,
    }
