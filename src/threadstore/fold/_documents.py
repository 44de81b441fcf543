"""JSON documents a run keeps: the AG-UI state (STATE_*), activities (ACTIVITY_*) and
the payloads of CUSTOM events.

A snapshot replaces the document; a delta applies an RFC 6902 patch all-or-nothing,
and a patch that does not apply is skipped with a warning, keeping the last good one.
A CUSTOM event is a part of the agent's turn (data, or a citation) listed with its
payload in the parts order of the agent's current message, as the chat engine shows it;
a payload too big or too deep to store is kept out, named, with a warning.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
from collections.abc import Sequence
from typing import Any

import jsonpatch
from ag_ui.core import (
    ActivityDeltaEvent,
    ActivitySnapshotEvent,
    CustomEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
)
from pydantic import BaseModel

from threadstore.binary_json import encode_value
from threadstore.fold._records import FoldRecord
from threadstore.fold._table import Handler, RecordTable
from threadstore.models import (
    CITATION_EVENT_NAME,
    MAX_DATA_NAME_CHARS,
    MAX_DATA_PAYLOAD_BYTES,
    MAX_DATA_PAYLOAD_DEPTH,
    Role,
)
from threadstore.usage import USAGE_EVENT_NAME

__all__ = ["HANDLERS", "apply_json_patch", "payload_refusal"]

_SURROGATE = re.compile("[\ud800-\udfff]")

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


def _too_deep(value: Any, limit: int) -> bool:
    """Whether objects and arrays nest deeper than ``limit`` in ``value`` (no recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth >= limit:
                return True
            items = item.values() if isinstance(item, dict) else item
            stack.extend((inner, depth + 1) for inner in items)
    return False


def _bad_text(value: Any) -> bool:
    """Whether a string in ``value`` (keys too) holds text no backend stores alike."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item or (not item.isascii() and _SURROGATE.search(item)):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def payload_refusal(value: Any) -> str | None:
    """Why a CUSTOM payload is not stored, or None when it is (the bounds in threadstore.models).

    It must be JSON (bytes and models as the store's codec writes them), nest at most
    :data:`MAX_DATA_PAYLOAD_DEPTH` levels, hold no NUL character or lone surrogate (the
    server refuses those in what it stores too) and be at most
    :data:`MAX_DATA_PAYLOAD_BYTES` of JSON.
    """
    if _too_deep(value, MAX_DATA_PAYLOAD_DEPTH):
        return f"nested more than {MAX_DATA_PAYLOAD_DEPTH} levels deep"
    try:
        encoded = encode_value(value)
        text = json.dumps(encoded, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"not JSON ({type(exc).__name__})"
    if _bad_text(encoded):
        return "holds a NUL character or a lone surrogate"
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_DATA_PAYLOAD_BYTES:
        return f"{size} bytes of JSON; the limit is {MAX_DATA_PAYLOAD_BYTES}"
    return None


def _on_state_snapshot(fold: RecordTable, event: StateSnapshotEvent) -> None:
    fold.state = copy.deepcopy(event.snapshot)
    fold.state_version += 1


def _on_state_delta(fold: RecordTable, event: StateDeltaEvent) -> None:
    try:
        fold.state = apply_json_patch(fold.state, event.delta)
    except Exception as exc:  # any patch failure: skip it, keep the last good state
        fold.warn(f"STATE_DELTA did not apply ({exc}); skipped")
        return
    fold.state_version += 1


def _activity(fold: RecordTable, event: ActivitySnapshotEvent | ActivityDeltaEvent) -> FoldRecord:
    record, opened = fold.message_for(event.message_id, Role.ACTIVITY, event)
    if opened:
        record.activity_type = event.activity_type
        record.activity_content = {}
        if record.subagent_run_id is None:
            fold.add_part(record, {"type": "data"})
    return record


def _on_activity_snapshot(fold: RecordTable, event: ActivitySnapshotEvent) -> None:
    existed = fold.find(event.message_id, Role.ACTIVITY) is not None
    record = _activity(fold, event)
    if existed and event.replace is False:
        return
    record.activity_content = copy.deepcopy(event.content)
    fold.touch(record, content=True)


def _on_activity_delta(fold: RecordTable, event: ActivityDeltaEvent) -> None:
    if fold.find(event.message_id, Role.ACTIVITY) is None:
        fold.warn(f"ACTIVITY_DELTA for unknown activity {event.message_id!r}; it was opened")
    record = _activity(fold, event)
    try:
        record.activity_content = apply_json_patch(record.activity_content or {}, event.patch)
    except Exception as exc:  # any patch failure: skip it, keep the last good content
        fold.warn(f"ACTIVITY_DELTA for {event.message_id!r} did not apply ({exc}); skipped")
        return
    fold.touch(record, content=True)


def _payload(fold: RecordTable, event: CustomEvent, key: str) -> dict[str, Any]:
    """The entry's payload field, or ``omitted`` (why) when it is not storable."""
    refusal = payload_refusal(event.value)
    if refusal is None:
        return {key: copy.deepcopy(event.value)}
    fold.warn(f"CUSTOM {event.name!r}: payload not stored, {refusal}")
    return {"omitted": refusal}


def _on_custom(fold: RecordTable, event: CustomEvent) -> None:
    if event.name == USAGE_EVENT_NAME:  # a sub-agent's usage is the run's too
        fold.run.usage_reports.append(event.value)
    # A sub-agent's parts are its own turn's, which the store does not list.
    if getattr(event, "subagent_run_id", None) is not None:
        return
    value = event.value
    # Only a string id addresses an entry, as in the chat engine.
    data_id = value.get("id") if isinstance(value, dict) else None
    for label in (event.name, data_id if isinstance(data_id, str) else ""):
        if len(label) > MAX_DATA_NAME_CHARS or _bad_text(label):
            fold.warn(
                f"CUSTOM {event.name[:40]!r}: not stored, its name or id is over "
                f"{MAX_DATA_NAME_CHARS} characters or holds a NUL or a lone surrogate"
            )
            return
    if event.name == CITATION_EVENT_NAME:
        fold.add_data_part({"type": "citation", **_payload(fold, event, "citation")})
        return
    payload = _payload(fold, event, "payload")
    if isinstance(data_id, str):
        if fold.replace_data_part(event.name, data_id, payload):
            return
        payload = {"id": data_id, **payload}
    fold.add_data_part({"type": "data", "name": event.name, **payload})


HANDLERS: dict[str, Handler] = {
    "STATE_SNAPSHOT": _on_state_snapshot,
    "STATE_DELTA": _on_state_delta,
    "ACTIVITY_SNAPSHOT": _on_activity_snapshot,
    "ACTIVITY_DELTA": _on_activity_delta,
    "CUSTOM": _on_custom,
}
