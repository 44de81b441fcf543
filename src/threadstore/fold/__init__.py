"""The pure fold: one run's AG-UI events -> the records that run produced (no I/O).

:class:`ConversationFold` holds the records of one run and applies events to them one
at a time; the storage agent feeds it and writes the records it marks dirty. One
module per event family (text, tools, reasoning, documents, snapshot) over a shared
record table; :meth:`ConversationFold.apply_reference` is the reference path and
``apply`` adds its one fast path (``_fast.py``). How each event becomes records is
described in docs/architecture.md ("The fold").
"""

from threadstore.codec import tool_result_text
from threadstore.fold._append import (
    AppendPlan,
    Record,
    append_writes,
    plan_append,
    record_from_agui,
)
from threadstore.fold._conversation import ConversationFold, StorageState
from threadstore.fold._documents import apply_json_patch
from threadstore.fold._history import (
    HISTORY_INDEX,
    HistoryIndex,
    HistoryLookup,
    IdsAdded,
    pending_tool_calls,
    stored_ids,
)
from threadstore.fold._records import Changes, ContentBuffer, FoldRecord, RecordKind, RunInfo

__all__ = [
    "HISTORY_INDEX",
    "AppendPlan",
    "Changes",
    "ContentBuffer",
    "ConversationFold",
    "FoldRecord",
    "HistoryIndex",
    "HistoryLookup",
    "IdsAdded",
    "Record",
    "RecordKind",
    "RunInfo",
    "StorageState",
    "append_writes",
    "apply_json_patch",
    "pending_tool_calls",
    "plan_append",
    "record_from_agui",
    "stored_ids",
    "tool_result_text",
]
