"""The fold of one run: :class:`ConversationFold` applies events to its records in order.

It is a :class:`~threadstore.fold._table.RecordTable` whose dispatch table merges the
event families' handlers (text, tool calls, reasoning, documents, snapshots), and
itself folds what concerns the run as a whole: RUN_* lifecycle, steps and subagents.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from ag_ui import core as ag
from pydantic import BaseModel

from threadstore.codec import event_kind
from threadstore.fold import _documents, _reasoning, _snapshot, _text, _tools
from threadstore.fold._fast import fast_target
from threadstore.fold._records import FoldRecord
from threadstore.fold._table import RecordTable
from threadstore.models import MessageStatus, RunStatus

__all__ = ["ConversationFold", "StorageState"]

_TERMINAL_RUN = {
    MessageStatus.COMPLETE: RunStatus.COMPLETE,
    MessageStatus.INTERRUPTED: RunStatus.INTERRUPTED,
    MessageStatus.ERRORED: RunStatus.ERRORED,
}


def _dump(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_dump(item) for item in value]
    return value


class ConversationFold(RecordTable):
    """The records of one run, folded from its AG-UI events; pure data, no I/O.

    ``history`` is the chat's stored history (to recognise ids it already holds and
    tool calls still waiting for a result), or ``lookup`` what it holds, as a
    :class:`~threadstore.fold._history.HistoryIndex` answers for it; ``state`` is the
    AG-UI state the run starts from. :meth:`apply` folds one event and says whether it
    was a boundary; :meth:`apply_reference` is the same without its fast path.
    """

    def apply(self, event: ag.BaseEvent) -> bool:
        """Fold one event; True if it was a boundary (a record opened or closed, the run ended).

        The one fast path: a content delta for the record the previous event extended
        (and only extended) is appended without the lookups, exactly as
        :meth:`apply_reference` folds it; the tests fold streams both ways and compare.
        """
        fast = self._fast
        if fast is not None and type(event) is fast.kind and getattr(event, fast.field) == fast.id:
            # (``boundary`` is False already: the event before it set the target.)
            self.current_event_timestamp = event.timestamp
            delta: str = event.delta  # type: ignore[attr-defined]
            if delta or not fast.skip_empty:
                record = fast.record
                record.text.append(delta)
                record.version += 1
                record.content_version += 1
                self.dirty.add(record.key)
            return False
        boundary = self.apply_reference(event)
        self._fast = None if self.has_changes else fast_target(self, event, self.reader)
        return boundary

    def apply_reference(self, event: ag.BaseEvent) -> bool:
        """:meth:`apply` without its fast path: every event by its family's rules."""
        self._fast = None
        self.boundary = False
        self.current_event_timestamp = event.timestamp
        if self.reader.passes(event):
            events: tuple[ag.BaseEvent, ...] = (event,)
        else:
            self.reader, events = self.reader.read(event)
            if self.reader.warning is not None:
                self.warn(self.reader.warning)
        for one in events:
            handler = self._HANDLERS.get(event_kind(one))
            if handler is not None:  # RAW and unknown types: nothing of the conversation
                handler(self, one)
        return self.boundary

    def finish(self, status: MessageStatus) -> list[FoldRecord]:
        """End the run: every record it owns that is still active takes ``status``."""
        self.reader, ends = self.reader.close()
        for end in ends:  # a run of chunks still open ends as its END would end it
            self._HANDLERS[event_kind(end)](self, end)
        self.list_pending_parts()
        closed = [r for r in list(self.records.values()) if r.owned and r.in_progress]
        for record in closed:
            self.close(record, status)
        return closed

    # --- the run, its steps and subagents ------------------------------------------------

    def _on_run_started(self, event: ag.RunStartedEvent) -> None:
        if event.run_id != self.run.run_id:
            self.warn(f"RUN_STARTED names run {event.run_id!r}; folding into {self.run.run_id!r}")
        self.run.started = True
        self.run.status = None
        self.run.thread_id = event.thread_id or self.run.thread_id
        if event.parent_run_id is not None:
            self.run.parent_run_id = event.parent_run_id

    def _on_run_finished(self, event: ag.RunFinishedEvent) -> None:
        outcome = _dump(event.outcome)
        cancelled = isinstance(outcome, dict) and outcome.get("type") == "cancelled"
        status = MessageStatus.INTERRUPTED if cancelled else MessageStatus.COMPLETE
        self.run.outcome, self.run.usage = outcome, _dump(event.usage)
        self.run.result = event.result
        summary = {"outcome": outcome, "usage": self.run.usage, "result": _dump(event.result)}
        self._end_run(status, "run_finished", summary)

    def _on_run_error(self, event: ag.RunErrorEvent) -> None:
        self.run.error, self.run.error_code = event.message, event.code
        self.run.usage = _dump(event.usage)
        summary = {"message": event.message, "code": event.code, "usage": _dump(event.usage)}
        self._end_run(MessageStatus.ERRORED, "run_error", summary)

    def _end_run(self, status: MessageStatus, key: str, summary: dict[str, Any]) -> None:
        self.run.status = _TERMINAL_RUN[status]
        self.list_pending_parts()  # first: it may open the message the outcome is kept on
        kept = {k: v for k, v in summary.items() if v is not None}
        last = self.last_message()
        if last is not None and kept:
            last.metadata[key] = kept
            self.touch(last)
        self.finish(status)
        self.mark_boundary()

    def _on_step_started(self, event: ag.StepStartedEvent) -> None:
        self.steps.append(event.step_name)
        if getattr(event, "subagent_run_id", None) is None:
            self.add_step_part(event.step_name)

    def _on_step_finished(self, event: ag.StepFinishedEvent) -> None:
        if event.step_name not in self.steps:
            self.warn(f"STEP_FINISHED for step {event.step_name!r} that was not started")
            return
        index = len(self.steps) - 1 - self.steps[::-1].index(event.step_name)
        del self.steps[index]

    def _on_subagent_started(self, event: ag.SubagentStartedEvent) -> None:
        info = {"name": event.name, "description": event.description}
        self.subagents[event.subagent_run_id] = info
        call = self.tool_call(event.parent_tool_call_id) if event.parent_tool_call_id else None
        if call is not None and call.owned:
            call.metadata.setdefault("subagent_run_ids", []).append(event.subagent_run_id)
            self.touch(call)

    def _subagent_records(self, subagent_run_id: str) -> list[FoldRecord]:
        return [
            r
            for r in self.records.values()
            if r.owned and r.in_progress and r.subagent_run_id == subagent_run_id
        ]

    def _on_subagent_finished(self, event: ag.SubagentFinishedEvent) -> None:
        for record in self._subagent_records(event.subagent_run_id):
            self.close(record)

    def _on_subagent_error(self, event: ag.SubagentErrorEvent) -> None:
        error = {k: v for k, v in {"message": event.message, "code": event.code}.items() if v}
        for record in self._subagent_records(event.subagent_run_id):
            record.metadata["subagent_error"] = error
            self.close(record, MessageStatus.ERRORED)

    _HANDLERS: ClassVar[dict[str, Callable[[ConversationFold, Any], None]]] = {
        "RUN_STARTED": _on_run_started,
        "RUN_FINISHED": _on_run_finished,
        "RUN_ERROR": _on_run_error,
        "STEP_STARTED": _on_step_started,
        "STEP_FINISHED": _on_step_finished,
        "SUBAGENT_STARTED": _on_subagent_started,
        "SUBAGENT_FINISHED": _on_subagent_finished,
        "SUBAGENT_ERROR": _on_subagent_error,
        **_text.HANDLERS,
        **_tools.HANDLERS,
        **_reasoning.HANDLERS,
        **_snapshot.HANDLERS,
        **_documents.HANDLERS,
    }


StorageState = ConversationFold
"""The seed's name for the state handlers and build hooks receive."""
