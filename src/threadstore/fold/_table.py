"""The records of one run and the rules every event family shares to open, find and close them.

:class:`RecordTable` is the base of :class:`~threadstore.fold.ConversationFold`: the
record table, the dirty set and the changes the shell takes, and the id rules (one
AG-UI id, one record; an id already stored is never reused). The event families
(text, tool calls, reasoning, documents, snapshots) are functions of it.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Container, Iterable, Sequence
from typing import Any

from ag_ui.core import BaseEvent

from threadstore.codec import StreamReader
from threadstore.fold._fast import FastTarget
from threadstore.fold._history import HistoryIndex, HistoryLookup, IdsAdded
from threadstore.fold._records import Changes, FoldRecord, RecordKind, RunInfo
from threadstore.models import PARTS_METADATA_KEY, Message, MessageStatus, Role

__all__ = ["PARTS_METADATA_KEY", "Handler", "RecordTable", "family"]


_NOT_THE_AGENTS = (Role.USER, Role.SYSTEM, Role.DEVELOPER)
"""Roles of text messages a run may carry that are not the agent's turn (no parts listed)."""


def family(role: Role) -> str:
    """Group roles whose events may share a message: text, reasoning, activity."""
    return role.value if role in (Role.REASONING, Role.ACTIVITY) else "text"


Handler = Callable[["RecordTable", Any], None]
"""An event family's rule for one event type: it folds the event into the table."""


class RecordTable:
    """The records of one run (pure data, no I/O) and the plumbing every event family uses."""

    def __init__(
        self,
        run_id: str,
        *,
        thread_id: str | None = None,
        parent_run_id: str | None = None,
        history: Sequence[Message] = (),
        state: Any = None,
        lookup: HistoryLookup | None = None,
    ) -> None:
        self.run = RunInfo(run_id=run_id, thread_id=thread_id, parent_run_id=parent_run_id)
        self.reader = StreamReader(run_id)
        """The stream's one reading: chunks and THINKING_* events come to the handlers in
        their explicit form (``threadstore.codec.StreamReader``)."""
        self.records: dict[str, FoldRecord] = {}
        self.state: Any = copy.deepcopy(state)
        self.state_version = 0
        self.dirty: set[str] = set()
        self.current_event_timestamp: int | None = None
        if lookup is None:
            lookup = HistoryIndex(history).at(len(history))
        self.stored_ids: Container[str] = lookup.ids
        """Ids already stored in the chat when the run started."""
        self.known_ids = IdsAdded(lookup.ids)
        """Ids already stored in the chat or produced by this run."""
        self.aliases: dict[tuple[str, str], str] = {}
        """(family, AG-UI id) -> key of the record that took an id another family holds."""
        self.pending_calls = lookup.pending
        """Stored tool calls still waiting for a result, by tool call id."""
        self.stored_assistant = lookup.assistant
        """Stored assistant messages by AG-UI id: tool calls of this run may nest in them."""
        self.steps: list[str] = []
        """The stack of steps started and not finished yet."""
        self.subagents: dict[str, dict[str, Any]] = {}
        """Subagents announced by SUBAGENT_STARTED: name and description by run id."""
        self.boundary = False
        """Whether the event being folded opened or closed a record (or ended the run)."""
        self._order = itertools.count()
        self._anonymous = itertools.count(1)
        self._last_message: dict[str | None, str] = {}
        self._changes = Changes()
        self.has_changes = False
        """Whether :meth:`take_changes` has something: a record opened or closed, a warning."""
        self._fast: FastTarget | None = None
        """What ``apply``'s fast path may extend; anything else that changes a record
        clears it (a handler may change records between deltas)."""
        self._part_numbers = itertools.count()
        self.parts_tail: str | None = None
        """Key of the record whose text or reasoning segment is open (the newest element)."""
        self._pending_parts: list[dict[str, Any]] = []
        self._step_count = 0
        self._data_entries: dict[tuple[str, str], dict[str, Any]] = {}
        """Addressable CUSTOM entries of this run by (name, string id), to replace in place."""
        self._entry_holders: dict[int, str] = {}
        """Which record lists each CUSTOM entry, by the entry's ``n``."""
        self._holders: dict[str | None, str] = {}
        """Per subagent scope: the message opened to hold reasoning, waiting for its id."""
        # Reasoning spans (fold/_reasoning.py): the open one, its title, and the step keys
        # of each span not ended yet; here, as the family's functions keep no state.
        self._span: str | None = None
        self._span_title: str | None = None
        self._spans: dict[str, list[str]] = {}

    # --- reading -----------------------------------------------------------------------

    @property
    def active_step(self) -> str | None:
        return self.steps[-1] if self.steps else None

    @property
    def run_id(self) -> str:
        return self.run.run_id

    def message(self, agui_id: str) -> FoldRecord | None:
        """Return this run's message record with that AG-UI id."""
        found = self.records.get(f"m:{agui_id}")  # else a holder may have taken the id:
        return found or self.records.get(self.aliases.get(("text", agui_id), ""))

    def tool_call(self, tool_call_id: str) -> FoldRecord | None:
        return self.records.get(f"t:{tool_call_id}")

    def reasoning(self, agui_id: str) -> FoldRecord | None:
        return self.records.get(f"r:{agui_id}")

    def children(self, message: FoldRecord) -> list[FoldRecord]:
        return [r for r in self.records.values() if r.parent_key == message.key]

    def last_message(self) -> FoldRecord | None:
        """Return the last message record this run opened."""
        for record in reversed(self.records.values()):
            if record.kind is RecordKind.MESSAGE and record.owned:
                return record
        return None

    def last_message_of(self, scope: str | None) -> FoldRecord | None:
        """Return the last message record opened by subagent ``scope`` (None: the agent)."""
        return self.records.get(self._last_message.get(scope, ""))

    # --- what the shell takes ------------------------------------------------------------

    def take_changes(self) -> Changes:
        """Return what changed since the last call (opened/closed records, warnings)."""
        changes, self._changes = self._changes, Changes()
        self.has_changes = False
        return changes

    def take_dirty(self) -> list[FoldRecord]:
        """Return the records changed since the last call, in production order, and clear them."""
        records = sorted((self.records[key] for key in self.dirty), key=lambda r: r.order)
        self.dirty.clear()
        return records

    def touch(self, record: FoldRecord, *, content: bool = False) -> None:
        """Mark ``record`` changed so it is written (for handlers that edit records directly)."""
        self._fast = None
        record.version += 1
        if content:
            record.content_version += 1
        self.dirty.add(record.key)

    def extend(self, record: FoldRecord, delta: str) -> None:
        """Append a content delta to ``record`` (``apply``'s fast path does it inline)."""
        record.text.append(delta)
        self.touch(record, content=True)

    def mark_dirty(self, records: Iterable[FoldRecord]) -> None:
        """Put records back in the dirty set (a write of them failed)."""
        self.dirty.update(record.key for record in records)

    def warn(self, message: str) -> None:
        """Report an out-of-order or malformed event (the fold never raises on one)."""
        self._changes.warnings.append(message)
        self.has_changes = True

    def known(
        self, record: FoldRecord | None, event: str, what: str, agui_id: str
    ) -> FoldRecord | None:
        """``record``, or (it is ``None``) a warning that ``event`` named an unknown ``what``."""
        if record is None:
            self.warn(f"{event} for unknown {what} {agui_id!r}; ignored")
        return record

    def mark_boundary(self) -> None:
        """Flag the current event as a boundary: the writer flushes soon after it."""
        self.boundary = self._changes.boundary = self.has_changes = True

    def mark_closed(self, record: FoldRecord) -> None:
        """Report ``record`` as closed again (a stored record this run answered)."""
        self._changes.closed.append(record)
        self.mark_boundary()

    # --- opening and closing -------------------------------------------------------------

    def open_record(
        self,
        kind: RecordKind,
        key: str,
        event: BaseEvent | None,
        *,
        agui_id: str | None = None,
        role: Role | None = None,
        parent_key: str | None = None,
    ) -> FoldRecord:
        """Open a record of this run under ``key``, in the event's step and subagent."""
        scope = getattr(event, "subagent_run_id", None)
        record = FoldRecord(
            key=key,
            kind=kind,
            order=next(self._order),
            agui_id=agui_id,
            parent_key=parent_key,
            role=role,
            step_name=self.active_step,
            subagent_run_id=scope,
        )
        if scope is not None:
            record.metadata["subagent_run_id"] = scope
            name = self.subagents.get(scope, {}).get("name")
            if name is not None:
                record.metadata["subagent_name"] = name
        self.records[key] = record
        if agui_id is not None:
            self.known_ids.add(agui_id)
        if kind is RecordKind.MESSAGE:
            self._last_message[scope] = key
            if scope is None and self._pending_parts and role not in _NOT_THE_AGENTS:
                # Steps (and CUSTOM parts) that came before any message of the agent's.
                self._list(record, self._pending_parts)
                self._pending_parts = []
        self.touch(record, content=True)
        self._changes.opened.append(record)
        self.mark_boundary()
        return record

    def adopt(self, record: FoldRecord) -> FoldRecord:
        """Take a stored record of an earlier run in, to update it (it may replace a key)."""
        record.order = next(self._order)
        self.records[record.key] = record
        return record

    def close(self, record: FoldRecord, status: MessageStatus = MessageStatus.COMPLETE) -> bool:
        """End ``record`` with ``status`` (and a parent that ends with it); False if it had."""
        if not record.in_progress:
            return False
        record.status = status
        record.in_progress = False
        self.touch(record)
        self.mark_closed(record)
        parent = self.records.get(record.parent_key) if record.parent_key else None
        if parent is not None and parent.in_progress:
            if record.kind is RecordKind.REASONING and parent.role is Role.REASONING:
                self.close(parent, status)
            elif parent.implicit and not any(
                c.in_progress for c in self.children(parent) if c.kind is RecordKind.TOOL_CALL
            ):
                self.close(parent, status)
        return True

    # --- the parts order -----------------------------------------------------------------
    # The agent's own elements (not a subagent's) are listed on the record they belong to
    # when they open, never per delta, so the order is written with that record's own
    # writes: no record is written again just because another one opened.

    def add_part(self, record: FoldRecord | None, entry: dict[str, Any]) -> dict[str, Any]:
        """List a new element on ``record`` (None: the agent's next message); seals the segment."""
        self._fast = None
        entry = {"n": next(self._part_numbers), **entry}
        self.parts_tail = None
        if record is None:
            self._pending_parts.append(entry)
        elif record.owned:  # a stored record of an earlier run keeps the order it was written with
            self._list(record, [entry])
            self.touch(record)
        return entry

    def _list(self, record: FoldRecord, entries: list[dict[str, Any]]) -> None:
        record.metadata.setdefault(PARTS_METADATA_KEY, []).extend(entries)
        for entry in entries:
            if "name" in entry:  # a CUSTOM entry: a later event may replace it in place
                self._entry_holders[entry["n"]] = record.key

    def current_message(self) -> FoldRecord | None:
        """The agent's message a CUSTOM part is listed on: its last one of the turn, if any."""
        last = self.last_message_of(None)
        if last is None or not last.owned or last.role in _NOT_THE_AGENTS:
            return None
        return last

    def add_data_part(self, entry: dict[str, Any]) -> None:
        """List a CUSTOM part (``data`` or ``citation``) on the agent's current message.

        With no current message it waits, as a step start does, for the agent's next
        message, or the run's last one at its end (:meth:`list_pending_parts`).
        """
        entry = self.add_part(self.current_message(), entry)
        if isinstance(entry.get("id"), str):
            self._data_entries[(entry["name"], entry["id"])] = entry
        self.mark_boundary()

    def replace_data_part(self, name: str, id: str, fields: dict[str, Any]) -> bool:
        """Replace the payload of this run's CUSTOM entry ``(name, id)`` in place; False if none.

        The entry keeps its place, and the open segment stays open: nothing new opened.
        """
        entry = self._data_entries.get((name, id))
        if entry is None:
            return False
        for key in ("payload", "omitted"):
            entry.pop(key, None)
        entry.update(fields)
        holder = self.records.get(self._entry_holders.get(entry["n"], ""))
        if holder is not None:
            self.touch(holder)
        self.mark_boundary()
        return True

    def grow_segment(self, kind: str, record: FoldRecord) -> None:
        """Before a delta of ``record``: open a text/reasoning segment unless it is the open one."""
        if record.subagent_run_id is not None or self.parts_tail == record.key:
            return
        if kind == "text" and record.role is not Role.ASSISTANT:
            return  # a user/system text message is not one of the agent's elements
        self.add_part(record, {"type": kind, "start": len(record.content)})
        self.parts_tail = record.key

    def seal_segment(self, kind: str, record: FoldRecord | None = None) -> None:
        """End the open segment if it is of ``kind`` (and ``record``'s, when given)."""
        self._fast = None
        tail = self.records.get(self.parts_tail) if self.parts_tail is not None else None
        if tail is None or (record is not None and tail is not record):
            return
        if (tail.kind is RecordKind.REASONING) == (kind == "reasoning"):
            self.parts_tail = None

    def add_step_part(self, name: str) -> None:
        """List a step start (numbered from 0 within the run) on the agent's next message."""
        entry = {"type": "step-start", "step": self._step_count, "name": name}
        self.add_part(None, entry)
        self._step_count += 1

    def agent_message(self, scope: str | None) -> FoldRecord | None:
        """The last message of the agent's (``scope``: a subagent's) this run opened, if any.

        A user, system or developer message the run carried is not the agent's.
        """
        for record in reversed(self.records.values()):
            if (
                record.kind is RecordKind.MESSAGE
                and record.owned
                and record.subagent_run_id == scope
                and record.role not in _NOT_THE_AGENTS
            ):
                return record
        return None

    def list_pending_parts(self) -> None:
        """At the run's end: parts no message followed are listed on the agent's last message.

        A run that opened no message of the agent's stores them nowhere: its step starts,
        and its CUSTOM parts too (as the seed layer stores nothing for an event it has no
        message for), with a warning naming how many were dropped.
        """
        pending, self._pending_parts = self._pending_parts, []
        if not pending:
            return
        last = self.current_message() or self.agent_message(None)
        if last is None:
            dropped = sum(entry["type"] != "step-start" for entry in pending)
            if dropped:
                self.warn(f"{dropped} CUSTOM part(s) not stored: the run wrote no message")
            return
        self._list(last, pending)
        self.touch(last)

    # --- messages by id ------------------------------------------------------------------

    def find(self, agui_id: str, role: Role) -> FoldRecord | None:
        """Return the message of ``role``'s family (text, reasoning, activity) with that id."""
        kind = family(role)
        record = self.records.get(self.aliases.get((kind, agui_id), f"m:{agui_id}"))
        if record is None or record.role is None or family(record.role) != kind:
            return None
        return record

    def reasoning_holder(self, event: BaseEvent | None) -> FoldRecord:
        """The assistant message a new reasoning step nests in (see fold/_reasoning.py)."""
        scope = getattr(event, "subagent_run_id", None)
        last = self.last_message_of(scope)
        if last is not None and last.key == self._holders.get(scope):
            self._reopen(last)  # more reasoning before the answer: the same message holds it
            return last
        if last is not None and last.owned and last.in_progress and last.role is Role.ASSISTANT:
            return last
        holder, _ = self.message_for(None, Role.ASSISTANT, event)
        holder.implicit = True  # it ends with its reasoning, until the answer takes it
        self._holders[scope] = holder.key
        return holder

    def _reopen(self, message: FoldRecord) -> None:
        if not message.in_progress:
            message.status, message.in_progress = MessageStatus.ACTIVE, True
            self.touch(message)

    def _take_holder(self, agui_id: str, role: Role, event: BaseEvent | None) -> FoldRecord | None:
        """The message holding this turn's reasoning, if the assistant message ``agui_id`` is it."""
        scope = getattr(event, "subagent_run_id", None)
        key = self._holders.pop(scope, None)
        holder = self.records.get(key) if key is not None else None
        if holder is None or role is not Role.ASSISTANT or agui_id in self.stored_ids:
            return None
        if self.last_message_of(scope) is not holder or holder.content or not holder.owned:
            return None
        holder.agui_id, holder.implicit = agui_id, False
        self.aliases[("text", agui_id)] = holder.key
        self.known_ids.add(agui_id)
        self._reopen(holder)
        self.touch(holder)
        return holder

    def message_for(
        self, agui_id: str | None, role: Role, event: BaseEvent | None
    ) -> tuple[FoldRecord, bool]:
        """Return (message record for ``agui_id``, opened?) following the reuse rules."""
        if agui_id is None:
            key = f"m#{next(self._anonymous)}"
            return self.open_record(RecordKind.MESSAGE, key, event, role=role), True
        record = self.find(agui_id, role)
        if record is not None:
            return record, False
        holder = self._take_holder(agui_id, role, event)
        if holder is not None:
            return holder, True
        taken = self.message(agui_id)
        if taken is not None:
            self.warn(f"message {agui_id!r} is a {taken.role} message; {role} content kept apart")
            return self._renamed(agui_id, role, event, "conflicting_agui_id"), True
        if agui_id in self.stored_ids:
            self.warn(f"message id {agui_id!r} is already stored in the chat; not reused")
            return self._renamed(agui_id, role, event, "duplicate_agui_id"), True
        key = f"m:{agui_id}"
        return self.open_record(RecordKind.MESSAGE, key, event, agui_id=agui_id, role=role), True

    def _renamed(self, agui_id: str, role: Role, event: BaseEvent | None, why: str) -> FoldRecord:
        key = f"m#{next(self._anonymous)}"
        record = self.open_record(RecordKind.MESSAGE, key, event, role=role)
        record.metadata[why] = agui_id
        self.aliases[(family(role), agui_id)] = record.key
        return record
