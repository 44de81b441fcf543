"""The pure fold: one run's AG-UI events -> the records that run produced (no I/O).

:class:`ConversationFold` holds the records of one run and applies events to them one
at a time. It never touches a store or an event loop; the storage agent feeds it and
writes the records it marks dirty. Streamed text lives in a :class:`ContentBuffer`
(O(1) amortized per delta), so folding costs O(content), whatever the delta count.

How events become records
-------------------------
- **One AG-UI message id, one stored message.** A text message becomes a message with
  the event's role (``assistant`` by default). A reasoning message becomes a message
  with role ``reasoning`` (empty ``content``) holding one nested reasoning step whose
  ``agui_id`` is the reasoning message id; the step carries the text, the encrypted
  value, and the title of the span it is in as ``name``. The deprecated ``THINKING_*``
  events are first translated to their ``REASONING_*`` twins with deterministic ids
  (:class:`threadstore.agui.legacy.ThinkingTranslator`), so a thinking title becomes
  the step's ``name``. An activity becomes a message with role ``activity``.
- **Tool calls** nest in the message named by ``parent_message_id``: one of this run's
  assistant messages, or an assistant message already stored in the chat. Without a
  usable parent they join the run's last message when that is an assistant message,
  else a new assistant message is opened for them (with ``parent_message_id`` as its
  AG-UI id when one was given). Such an *implicit* message completes when its last
  open call ends.
- **Tool results** are kept on their tool call (``content``, ``result_message_id``),
  not as separate messages; history translation replays them as tool messages. A
  result may also answer a call stored by an earlier run that had no result yet.
- **Production order** is the order records are opened; the writer creates them in
  that order, so the store's ``seq`` follows production.
- **Statuses.** A record is ``active`` while it streams and ``complete`` at its end
  event (``*_END``, the next event after a ``*_CHUNK`` run, ``REASONING_END`` for its
  span). ``RUN_FINISHED`` completes every record still active (an outcome of
  ``cancelled`` interrupts them instead), ``RUN_ERROR`` marks them ``errored``, and
  :meth:`ConversationFold.finish` applies the status of however else the run ended.
  Only records this run opened are finalized, never stored ones it merely answered.
- **Run outcome.** ``RUN_FINISHED`` keeps outcome, usage and result under
  ``metadata["run_finished"]`` of the run's last message; ``RUN_ERROR`` keeps message,
  code and usage under ``metadata["run_error"]``. ``parent_run_id`` is kept on
  :attr:`ConversationFold.run`.
- **Steps.** ``STEP_STARTED``/``STEP_FINISHED`` keep a stack; records opened inside a
  step carry its name in ``step_name``.
- **State.** ``STATE_SNAPSHOT`` replaces the state, ``STATE_DELTA`` applies a JSON Patch
  atomically; a patch that does not apply is skipped with a warning.
- **MESSAGES_SNAPSHOT.** Every message in it whose id is not already known (stored in
  the chat, or produced by this run) is stored as a complete record, in snapshot
  order; a tool message answers its call if that call has no result yet. Messages
  already known are never rewritten: the store is the source of truth.
- **Activities.** ``ACTIVITY_SNAPSHOT`` creates or replaces the content (unless
  ``replace`` is false on an existing one); ``ACTIVITY_DELTA`` patches it.
- **Subagents.** Records opened by an event carrying ``subagent_run_id`` get
  ``metadata["subagent_run_id"]`` (and ``"subagent_name"`` once ``SUBAGENT_STARTED``
  named it). ``SUBAGENT_FINISHED`` completes the subagent's still-active records,
  ``SUBAGENT_ERROR`` marks them errored with ``metadata["subagent_error"]``. "The
  run's last message" is tracked per subagent, so interleaved agents stay apart.
- **CUSTOM and RAW** are not folded: they carry application- or provider-specific
  payloads with no place in the conversation. (The storage agent routes them to
  ``handle_unknown_event``, which subclasses override to persist them.)
- **Out-of-order events never raise.** Content, arguments or an encrypted value for
  an unknown id open the record they name; an end for an unknown id is ignored; an id
  already stored in the chat is not reused (the new record gets no AG-UI id and keeps
  the id in ``metadata["duplicate_agui_id"]``). Each case adds a warning to
  :attr:`Changes.warnings`.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, ClassVar
from uuid import UUID

import jsonpatch
from ag_ui.core import (
    ActivityDeltaEvent,
    ActivitySnapshotEvent,
    AssistantMessage,
    BaseEvent,
    DeveloperMessage,
    MessagesSnapshotEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessage,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    SystemMessage,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from ag_ui.core import ActivityMessage as AguiActivityMessage
from ag_ui.core import TextPart as AguiTextPart
from pydantic import BaseModel

from threadstore.agui.legacy import THINKING_TITLE_METADATA_KEY, ThinkingTranslator
from threadstore.agui.translate import (
    AGUI_METADATA_KEY,
    message_create_from_agui,
    tool_result_message_id,
)
from threadstore.errors import InvalidInputError
from threadstore.models import ContentPart, Message, MessageStatus, Role, RunStatus, ToolCall

__all__ = [
    "Changes",
    "ContentBuffer",
    "ConversationFold",
    "FoldRecord",
    "RecordKind",
    "RunInfo",
    "StorageState",
    "apply_json_patch",
    "event_type_name",
    "pending_tool_calls",
    "stored_ids",
    "tool_result_text",
]


# --- plain helpers ---------------------------------------------------------------------


class ContentBuffer:
    """Text grown by appending deltas: O(1) amortized per append, joined once per read.

    Unread deltas are also joined once they outnumber ``len(text) / 128`` (and 256), so
    a stream nobody reads meanwhile (a stalled store) holds about its text, not one
    string object per delta; each join copies at most ~128 characters per append since
    the last one.
    """

    __slots__ = ("_joined", "_limit", "_parts")

    def __init__(self, text: str = "") -> None:
        self._parts: list[str] = [text] if text else []
        self._joined: str | None = text
        self._limit = _MIN_UNJOINED

    def append(self, delta: str) -> None:
        """Add ``delta`` at the end."""
        if delta:
            self._parts.append(delta)
            self._joined = None
            if len(self._parts) > self._limit:
                self._join()

    def replace(self, text: str) -> None:
        """Make ``text`` the whole content."""
        self._parts = [text] if text else []
        self._joined = text

    @property
    def text(self) -> str:
        """The content so far (joined and cached; the chunks collapse into one)."""
        if self._joined is None:
            self._join()
        assert self._joined is not None
        return self._joined

    def _join(self) -> None:
        joined = self._joined = "".join(self._parts)
        self._parts = [joined]
        self._limit = max(_MIN_UNJOINED, len(joined) >> 7)


_MIN_UNJOINED = 256
"""Unread deltas a :class:`ContentBuffer` keeps apart before joining them anyway."""

# How ConversationFold.apply_deltas extends a run of content deltas: the attribute
# naming the record, the fast path's id cache, and which deltas its fast path appends
# (every one, only non-empty ones, or every one when the run owns the record).
_GROW_ALL, _GROW_NONEMPTY, _GROW_OWNED = "all", "nonempty", "owned"
_DELTA_RUNS: dict[type[BaseEvent], tuple[str, str, str]] = {
    TextMessageContentEvent: ("message_id", "_text_ids", _GROW_ALL),
    ReasoningMessageContentEvent: ("message_id", "_reasoning_ids", _GROW_NONEMPTY),
    ToolCallArgsEvent: ("tool_call_id", "_tool_ids", _GROW_OWNED),
}


def event_type_name(event: BaseEvent) -> str:
    """Return an event's wire type (``"TEXT_MESSAGE_START"``...), enum or plain string."""
    kind: Any = event.type
    return str(kind.value) if isinstance(kind, Enum) else str(kind)


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


def tool_result_text(content: str | Sequence[Any]) -> tuple[str, bool]:
    """Return (text, as_json): text parts joined by newlines, or all parts as JSON if media."""
    if isinstance(content, str):
        return content, False
    parts: list[Any] = list(content)
    if all(isinstance(part, AguiTextPart) for part in parts):
        return "\n".join(part.text for part in parts), False
    return json.dumps([part.model_dump(mode="json", by_alias=True) for part in parts]), True


def stored_ids(messages: Iterable[Message]) -> set[str]:
    """Every id a client may echo for stored history: AG-UI ids, uuids, tool call and result ids."""
    ids: set[str] = set()
    for message in messages:
        ids.add(str(message.message_uuid))
        if message.agui_id:
            ids.add(message.agui_id)
        for call in message.tool_calls:
            ids.update((call.tool_call_id, str(call.uuid)))
            if call.result_message_id or call.content is not None or call.error is not None:
                ids.add(tool_result_message_id(call))
        for step in message.reasonings:
            ids.add(str(step.uuid))
            if step.agui_id:
                ids.add(step.agui_id)
    return ids


def pending_tool_calls(messages: Iterable[Message]) -> dict[str, ToolCall]:
    """Stored tool calls that have no result yet, by AG-UI tool call id."""
    return {
        call.tool_call_id: call
        for message in messages
        for call in message.tool_calls
        if call.content is None and call.result_message_id is None
    }


# --- records ---------------------------------------------------------------------------


class RecordKind(StrEnum):
    """What a fold record becomes in the store."""

    MESSAGE = "message"
    TOOL_CALL = "tool_call"
    REASONING = "reasoning"


@dataclass(eq=False, slots=True)
class FoldRecord:
    """One message, tool call or reasoning step as the run has produced it so far."""

    key: str
    kind: RecordKind
    order: int
    """Production order within the run."""
    agui_id: str | None = None
    """Message id, tool call id, or reasoning message id."""
    parent_key: str | None = None
    """For tool calls and reasoning steps: the key of the message holding them."""
    role: Role | None = None
    name: str | None = None
    text: ContentBuffer = field(default_factory=ContentBuffer)
    """Message content, reasoning content, or tool call arguments."""
    content_parts: list[ContentPart] | None = None
    result: str | None = None
    result_message_id: str | None = None
    encrypted_value: str | None = None
    activity_type: str | None = None
    activity_content: dict[str, Any] | None = None
    status: MessageStatus = MessageStatus.ACTIVE
    in_progress: bool = True
    step_name: str | None = None
    subagent_run_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    owned: bool = True
    """False for a stored record of an earlier run that this run only updates."""
    implicit: bool = False
    """An assistant message opened only to hold tool calls."""
    uuid: UUID | None = None
    """The store uuid, once the shell (or the stored record) has one."""
    version: int = 0
    """Bumped on every change; the writer compares it with what it has written."""
    content_version: int = 0
    """Bumped when ``text``/``content_parts``/``activity_content``/``result`` change."""

    @property
    def content(self) -> str:
        """The accumulated text."""
        return self.text.text


@dataclass(slots=True)
class RunInfo:
    """What the fold knows about the run itself."""

    run_id: str
    thread_id: str | None = None
    parent_run_id: str | None = None
    started: bool = False
    status: RunStatus | None = None
    """Terminal status announced in-band (RUN_FINISHED / RUN_ERROR), if any."""
    outcome: dict[str, Any] | None = None
    usage: list[dict[str, Any]] | None = None
    result: Any = None
    error: str | None = None
    error_code: str | None = None


@dataclass(slots=True)
class Changes:
    """What happened since the last :meth:`ConversationFold.take_changes`."""

    opened: list[FoldRecord] = field(default_factory=list)
    closed: list[FoldRecord] = field(default_factory=list)
    boundary: bool = False
    warnings: list[str] = field(default_factory=list)


_TERMINAL_RUN = {
    MessageStatus.COMPLETE: RunStatus.COMPLETE,
    MessageStatus.INTERRUPTED: RunStatus.INTERRUPTED,
    MessageStatus.ERRORED: RunStatus.ERRORED,
}

_CHUNK_SLOTS = {
    "TEXT_MESSAGE_CHUNK": "_text_chunk",
    "TOOL_CALL_CHUNK": "_tool_chunk",
    "REASONING_MESSAGE_CHUNK": "_reasoning_chunk",
}


_REASONING, _ACTIVITY = Role.REASONING, Role.ACTIVITY
"""Bound once: looking a member up on its enum class costs about 150 ns (Python 3.11)."""


def _family(role: Role) -> str:
    """Group roles whose events may share a message: text, reasoning, activity."""
    return role.value if role in (Role.REASONING, Role.ACTIVITY) else "text"


def _dump(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_dump(item) for item in value]
    return value


# --- the fold --------------------------------------------------------------------------


class ConversationFold:
    """The records of one run, folded from its AG-UI events; pure data, no I/O.

    ``history`` is the chat's stored history (to recognise ids it already holds and
    tool calls still waiting for a result); ``state`` is the AG-UI state the run starts
    from. :meth:`apply` folds one event and says whether it was a boundary.
    """

    def __init__(
        self,
        run_id: str,
        *,
        thread_id: str | None = None,
        parent_run_id: str | None = None,
        history: Sequence[Message] = (),
        state: Any = None,
    ) -> None:
        self.run = RunInfo(run_id=run_id, thread_id=thread_id, parent_run_id=parent_run_id)
        self.records: dict[str, FoldRecord] = {}
        self.state: Any = copy.deepcopy(state)
        self.state_version = 0
        self.dirty: set[str] = set()
        self.current_event_timestamp: int | None = None
        self.known_ids = stored_ids(history)
        """Ids already stored in the chat or produced by this run."""
        self._stored_ids = frozenset(self.known_ids)
        self._aliases: dict[tuple[str, str], str] = {}
        self._pending_calls = pending_tool_calls(history)
        self._stored_assistant = {
            m.agui_id: m.message_uuid for m in history if m.agui_id and m.role == Role.ASSISTANT
        }
        self._order = itertools.count()
        self._anonymous = itertools.count(1)
        self._steps: list[str] = []
        self._last_message: dict[str | None, str] = {}
        self._text_chunk: str | None = None
        self._tool_chunk: str | None = None
        self._reasoning_chunk: str | None = None
        self._span: str | None = None
        self._spans: dict[str, list[str]] = {}
        self._span_title: str | None = None
        self._thinking = ThinkingTranslator(run_id)
        self._subagents: dict[str, dict[str, Any]] = {}
        self._changes = Changes()
        self._boundary = False
        # The delta fast paths' lookups by the event's own id: the record under a key
        # never changes (only _adopt_* may replace one, and they clear these).
        self._text_ids: dict[str, FoldRecord] = {}
        self._tool_ids: dict[str, FoldRecord] = {}
        self._reasoning_ids: dict[str, FoldRecord] = {}
        self._delta_folders: dict[type[BaseEvent], Callable[[Any], bool]] = {
            TextMessageContentEvent: self._fast_text_content,
            TextMessageChunkEvent: self._fast_text_chunk,
            ToolCallArgsEvent: self._fast_tool_args,
            ToolCallChunkEvent: self._fast_tool_chunk,
            ReasoningMessageContentEvent: self._fast_reasoning_content,
            ReasoningMessageChunkEvent: self._fast_reasoning_chunk,
        }

    # --- public surface ----------------------------------------------------------------

    @property
    def active_step(self) -> str | None:
        """The innermost step started and not yet finished."""
        return self._steps[-1] if self._steps else None

    @property
    def run_id(self) -> str:
        """The run this fold belongs to."""
        return self.run.run_id

    def apply(self, event: BaseEvent) -> bool:
        """Fold one event; True if it was a boundary (a record opened or closed, the run ended)."""
        self._boundary = False
        self.current_event_timestamp = event.timestamp
        kind = event_type_name(event)
        if kind.startswith("THINKING_") or kind == "RUN_STARTED":
            # THINKING_* fold exactly as their REASONING_* twins, with deterministic ids.
            event = self._thinking(event)
            kind = event_type_name(event)
        for chunk_kind, slot in _CHUNK_SLOTS.items():
            if kind != chunk_kind:
                self._close_chunk(slot)
        handler = self._HANDLERS.get(kind)
        if handler is not None:
            handler(self, event)
        return self._boundary

    def apply_delta(self, event: BaseEvent) -> bool:
        """Fold a streamed delta onto the open record it extends, exactly as :meth:`apply`.

        The fast path for the events most of a stream is made of (text, tool argument
        and reasoning deltas, and their chunk forms): True when ``event`` was folded
        (never a boundary); False, with nothing changed, when it needs :meth:`apply`
        (another event type, a subclass, or a delta that opens or closes a record).
        """
        folder = self._delta_folders.get(type(event))
        return folder is not None and folder(event)

    def delta_folders(self) -> dict[type[BaseEvent], Callable[[Any], bool]]:
        """:meth:`apply_delta` split by exact event class, for callers that dispatch already."""
        return dict(self._delta_folders)

    def apply_deltas(self, events: Sequence[BaseEvent], start: int = 0) -> int:
        """Fold ``events[start]``, and the content deltas after it for the same record, at once.

        Exactly what :meth:`apply_delta` does for each of them in turn (the same text,
        versions, dirty set and timestamp), for the runs of one message's, tool call's
        or reasoning message's content deltas a stream is mostly made of: the record
        is looked up once and the deltas appended together. Returns how many events it
        folded; 0 when ``events[start]`` needs :meth:`apply`. A chunk event is folded
        alone.
        """
        first = events[start]
        kind: Any = type(first)  # Any: a follower of this class is a content delta event
        folder = self._delta_folders.get(kind)
        if folder is None or not folder(first):
            return 0
        run = _DELTA_RUNS.get(kind)
        if run is None:
            return 1
        attr, cache, mode = run
        target = getattr(first, attr)
        record = getattr(self, cache)[target]  # the fast path has just cached it
        every = mode is _GROW_ALL or (mode is _GROW_OWNED and record.owned)
        nonempty = mode is _GROW_NONEMPTY
        deltas: list[str] = []
        end, count = start + 1, len(events)
        while end < count:
            follower: Any = events[end]
            if type(follower) is not kind or getattr(follower, attr) != target:
                break
            if every or (nonempty and follower.delta):
                deltas.append(follower.delta)
            end += 1
        if end - start > 1:
            self.current_event_timestamp = events[end - 1].timestamp
            if deltas:
                self._grow_all(record, deltas)
        return end - start

    def finish(self, status: MessageStatus) -> list[FoldRecord]:
        """End the run: every record it owns that is still active takes ``status``."""
        for slot in _CHUNK_SLOTS.values():
            self._close_chunk(slot)
        closed = [r for r in list(self.records.values()) if r.owned and r.in_progress]
        for record in closed:
            self._close(record, status)
        return closed

    def take_changes(self) -> Changes:
        """Return what changed since the last call (opened/closed records, warnings)."""
        changes, self._changes = self._changes, Changes()
        return changes

    def take_dirty(self) -> list[FoldRecord]:
        """Return the records changed since the last call, in production order, and clear them."""
        records = sorted((self.records[key] for key in self.dirty), key=lambda r: r.order)
        self.dirty.clear()
        return records

    def touch(self, record: FoldRecord, *, content: bool = False) -> None:
        """Mark ``record`` changed so it is written (for handlers that edit records directly)."""
        self._touch(record, content=content)

    def mark_dirty(self, records: Iterable[FoldRecord]) -> None:
        """Put records back in the dirty set (a write of them failed)."""
        self.dirty.update(record.key for record in records)

    def message(self, agui_id: str) -> FoldRecord | None:
        """Return this run's message record with that AG-UI id."""
        return self.records.get(f"m:{agui_id}")

    def tool_call(self, tool_call_id: str) -> FoldRecord | None:
        """Return the tool call record with that AG-UI id."""
        return self.records.get(f"t:{tool_call_id}")

    def reasoning(self, agui_id: str) -> FoldRecord | None:
        """Return the reasoning step record with that AG-UI reasoning message id."""
        return self.records.get(f"r:{agui_id}")

    def children(self, message: FoldRecord) -> list[FoldRecord]:
        """Return the tool calls and reasoning steps nested in ``message``, in order."""
        return [r for r in self.records.values() if r.parent_key == message.key]

    def last_message(self) -> FoldRecord | None:
        """Return the last message record this run opened."""
        for record in reversed(self.records.values()):
            if record.kind is RecordKind.MESSAGE and record.owned:
                return record
        return None

    # --- record plumbing -----------------------------------------------------------------

    def _warn(self, message: str) -> None:
        self._changes.warnings.append(message)

    def _touch(self, record: FoldRecord, *, content: bool = False) -> None:
        record.version += 1
        if content:
            record.content_version += 1
        self.dirty.add(record.key)

    def _open(
        self,
        kind: RecordKind,
        key: str,
        event: BaseEvent | None,
        *,
        agui_id: str | None = None,
        role: Role | None = None,
        parent_key: str | None = None,
    ) -> FoldRecord:
        scope = getattr(event, "subagent_run_id", None) if event is not None else None
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
            name = self._subagents.get(scope, {}).get("name")
            if name is not None:
                record.metadata["subagent_name"] = name
        self.records[key] = record
        if agui_id is not None:
            self.known_ids.add(agui_id)
        if kind is RecordKind.MESSAGE:
            self._last_message[scope] = key
        self._touch(record, content=True)
        self._changes.opened.append(record)
        self._boundary = self._changes.boundary = True
        return record

    def _close(self, record: FoldRecord, status: MessageStatus = MessageStatus.COMPLETE) -> bool:
        if not record.in_progress:
            return False
        record.status = status
        record.in_progress = False
        self._touch(record)
        self._changes.closed.append(record)
        self._boundary = self._changes.boundary = True
        parent = self.records.get(record.parent_key) if record.parent_key else None
        if parent is not None and parent.in_progress:
            if record.kind is RecordKind.REASONING and parent.role is Role.REASONING:
                self._close(parent, status)
            elif parent.implicit and not any(
                c.in_progress for c in self.children(parent) if c.kind is RecordKind.TOOL_CALL
            ):
                self._close(parent, status)
        return True

    def _close_chunk(self, slot: str) -> None:
        key = getattr(self, slot)
        if key is None:
            return
        setattr(self, slot, None)
        record = self.records.get(key)
        if record is not None:
            self._close(record)

    def _anonymous_key(self, prefix: str) -> str:
        return f"{prefix}#{next(self._anonymous)}"

    def _find(self, agui_id: str, role: Role) -> FoldRecord | None:
        """Return the message of ``role``'s family (text, reasoning, activity) with that id."""
        family = _family(role)
        record = self.records.get(self._aliases.get((family, agui_id), f"m:{agui_id}"))
        if record is None or record.role is None or _family(record.role) != family:
            return None
        return record

    def _message_for(
        self, agui_id: str | None, role: Role, event: BaseEvent | None
    ) -> tuple[FoldRecord, bool]:
        """Return (message record for ``agui_id``, opened?) following the reuse rules."""
        if agui_id is None:
            return self._open(RecordKind.MESSAGE, self._anonymous_key("m"), event, role=role), True
        record = self._find(agui_id, role)
        if record is not None:
            return record, False
        taken = self.message(agui_id)
        if taken is not None:
            self._warn(f"message {agui_id!r} is a {taken.role} message; {role} content kept apart")
            return self._renamed(agui_id, role, event, "conflicting_agui_id"), True
        if agui_id in self._stored_ids:
            self._warn(f"message id {agui_id!r} is already stored in the chat; not reused")
            return self._renamed(agui_id, role, event, "duplicate_agui_id"), True
        key = f"m:{agui_id}"
        return self._open(RecordKind.MESSAGE, key, event, agui_id=agui_id, role=role), True

    def _renamed(self, agui_id: str, role: Role, event: BaseEvent | None, why: str) -> FoldRecord:
        record = self._open(RecordKind.MESSAGE, self._anonymous_key("m"), event, role=role)
        record.metadata[why] = agui_id
        self._aliases[(_family(role), agui_id)] = record.key
        return record

    def _text_target(self, agui_id: str, event: BaseEvent, what: str) -> FoldRecord:
        record = self._find(agui_id, Role.ASSISTANT)
        if record is None:
            self._warn(f"{what} for unknown message {agui_id!r}; the message was opened")
            record, _ = self._message_for(agui_id, Role.ASSISTANT, event)
        return record

    # --- the delta fast path (see apply_delta) ---------------------------------------------
    # Each returns False before changing anything unless its event would, through apply(),
    # only append to an existing record: no chunk of another kind open (apply would close
    # it; a chunk form checks only its own slot, as apply leaves at most one slot open),
    # no record to open, no warning. The tests fold streams both ways and compare.
    # Hot code: the body of _touch is inlined and enum members are module constants.

    def _grow(self, record: FoldRecord, delta: str) -> None:
        self._grow_all(record, [delta])

    def _grow_all(self, record: FoldRecord, deltas: list[str]) -> None:
        # ContentBuffer.append of each delta, inlined and in one step (the joins may fall
        # elsewhere; the text is the same); a version per delta, as apply counts them.
        buffer = record.text
        parts = buffer._parts
        parts.extend(deltas)
        buffer._joined = None
        if len(parts) > buffer._limit:
            buffer._join()
        record.version += len(deltas)
        record.content_version += len(deltas)
        self.dirty.add(record.key)

    def _fast_text_content(self, event: TextMessageContentEvent) -> bool:
        if self._text_chunk or self._tool_chunk or self._reasoning_chunk or self._aliases:
            return False
        record = self._text_ids.get(event.message_id)
        if record is None:
            record = self.records.get("m:" + event.message_id)
            if record is None:
                return False
            self._text_ids[event.message_id] = record
        role = record.role  # _find's family check: the text family only
        if role is None or role is _REASONING or role is _ACTIVITY:
            return False
        self.current_event_timestamp = event.timestamp
        self._grow(record, event.delta)
        return True

    def _open_chunk(self, key: str | None, given_id: str | None) -> FoldRecord | None:
        """The record of the open chunk slot ``key``, if an event naming ``given_id`` extends it."""
        if not key:
            return None
        record = self.records.get(key)
        if record is None or (given_id is not None and record.agui_id != given_id):
            return None
        return record

    def _fast_text_chunk(self, event: TextMessageChunkEvent) -> bool:
        record = self._open_chunk(self._text_chunk, event.message_id)
        if record is None or (event.name is not None and record.name is None):
            return False
        self.current_event_timestamp = event.timestamp
        delta = event.delta
        if delta:
            self._grow(record, delta)
        return True

    def _fast_tool_args(self, event: ToolCallArgsEvent) -> bool:
        if self._text_chunk or self._tool_chunk or self._reasoning_chunk:
            return False
        record = self._tool_ids.get(event.tool_call_id)
        if record is None:
            record = self.records.get("t:" + event.tool_call_id)
            if record is None:
                return False
            self._tool_ids[event.tool_call_id] = record
        self.current_event_timestamp = event.timestamp
        if record.owned:
            self._grow(record, event.delta)
        return True

    def _fast_tool_chunk(self, event: ToolCallChunkEvent) -> bool:
        record = self._open_chunk(self._tool_chunk, event.tool_call_id)
        if record is None:
            return False
        self.current_event_timestamp = event.timestamp
        delta = event.delta
        if delta and record.owned:
            self._grow(record, delta)
        return True

    def _fast_reasoning_content(self, event: ReasoningMessageContentEvent) -> bool:
        if self._text_chunk or self._tool_chunk or self._reasoning_chunk:
            return False
        record = self._reasoning_ids.get(event.message_id)
        if record is None:
            record = self.records.get("r:" + event.message_id)
            if record is None:
                return False
            self._reasoning_ids[event.message_id] = record
        self.current_event_timestamp = event.timestamp
        delta = event.delta
        if delta:
            self._grow(record, delta)
        return True

    def _fast_reasoning_chunk(self, event: ReasoningMessageChunkEvent) -> bool:
        record = self._open_chunk(self._reasoning_chunk, event.message_id)
        if record is None:
            return False
        self.current_event_timestamp = event.timestamp
        delta = event.delta
        if delta:
            self._grow(record, delta)
        return True

    # --- run lifecycle and steps ---------------------------------------------------------

    def _on_run_started(self, event: RunStartedEvent) -> None:
        if event.run_id != self.run.run_id:
            self._warn(f"RUN_STARTED names run {event.run_id!r}; folding into {self.run.run_id!r}")
        self.run.started = True
        self.run.status = None
        self.run.thread_id = event.thread_id or self.run.thread_id
        if event.parent_run_id is not None:
            self.run.parent_run_id = event.parent_run_id

    def _on_run_finished(self, event: RunFinishedEvent) -> None:
        outcome = _dump(event.outcome)
        cancelled = isinstance(outcome, dict) and outcome.get("type") == "cancelled"
        status = MessageStatus.INTERRUPTED if cancelled else MessageStatus.COMPLETE
        self.run.outcome, self.run.usage = outcome, _dump(event.usage)
        self.run.result = event.result
        summary = {"outcome": outcome, "usage": self.run.usage, "result": _dump(event.result)}
        self._end_run(status, "run_finished", summary)

    def _on_run_error(self, event: RunErrorEvent) -> None:
        self.run.error, self.run.error_code = event.message, event.code
        summary = {"message": event.message, "code": event.code, "usage": _dump(event.usage)}
        self._end_run(MessageStatus.ERRORED, "run_error", summary)

    def _end_run(self, status: MessageStatus, key: str, summary: dict[str, Any]) -> None:
        self.run.status = _TERMINAL_RUN[status]
        kept = {k: v for k, v in summary.items() if v is not None}
        last = self.last_message()
        if last is not None and kept:
            last.metadata[key] = kept
            self._touch(last)
        self.finish(status)
        self._boundary = self._changes.boundary = True

    def _on_step_started(self, event: StepStartedEvent) -> None:
        self._steps.append(event.step_name)

    def _on_step_finished(self, event: StepFinishedEvent) -> None:
        if event.step_name not in self._steps:
            self._warn(f"STEP_FINISHED for step {event.step_name!r} that was not started")
            return
        index = len(self._steps) - 1 - self._steps[::-1].index(event.step_name)
        del self._steps[index]

    # --- text messages -------------------------------------------------------------------

    def _on_text_start(self, event: TextMessageStartEvent) -> None:
        record, opened = self._message_for(event.message_id, Role(event.role or "assistant"), event)
        if not opened:
            if not record.implicit:
                self._warn(f"TEXT_MESSAGE_START repeated for message {event.message_id!r}")
            elif not record.in_progress and record.owned:
                # The message held only finished tool calls so far; it streams again.
                record.status, record.in_progress = MessageStatus.ACTIVE, True
                self._touch(record)
            record.implicit = False
        if event.name is not None and record.name != event.name:
            record.name = event.name
            self._touch(record)

    def _on_text_content(self, event: TextMessageContentEvent) -> None:
        record = self._text_target(event.message_id, event, "TEXT_MESSAGE_CONTENT")
        record.text.append(event.delta)
        self._touch(record, content=True)

    def _on_text_end(self, event: TextMessageEndEvent) -> None:
        record = self._find(event.message_id, Role.ASSISTANT)
        if record is None:
            self._warn(f"TEXT_MESSAGE_END for unknown message {event.message_id!r}; ignored")
            return
        record.implicit = False
        self._close(record)

    def _on_text_chunk(self, event: TextMessageChunkEvent) -> None:
        current = self.records.get(self._text_chunk) if self._text_chunk else None
        agui_id = event.message_id
        if agui_id is not None and (current is None or current.agui_id != agui_id):
            self._close_chunk("_text_chunk")
            current, _ = self._message_for(agui_id, Role(event.role or "assistant"), event)
            current.implicit = False
            self._text_chunk = current.key
        elif current is None:
            self._warn("TEXT_MESSAGE_CHUNK without a message id opened an anonymous message")
            current, _ = self._message_for(None, Role(event.role or "assistant"), event)
            self._text_chunk = current.key
        if event.name is not None and current.name is None:
            current.name = event.name
            self._touch(current)
        if event.delta:
            current.text.append(event.delta)
            self._touch(current, content=True)

    # --- tool calls ----------------------------------------------------------------------

    def _container(self, parent_message_id: str | None, event: BaseEvent) -> FoldRecord:
        """Return the assistant message a new tool call nests in (see the module rules)."""
        scope = getattr(event, "subagent_run_id", None)
        if parent_message_id is not None:
            named = self._find(parent_message_id, Role.ASSISTANT)
            if named is not None and named.role is Role.ASSISTANT:
                return named
            stored = self._stored_assistant.get(parent_message_id)
            if named is None and stored is not None:
                return self._adopt_message(parent_message_id, stored)
            if named is None and self.message(parent_message_id) is None:
                record, _ = self._message_for(parent_message_id, Role.ASSISTANT, event)
                record.implicit = True
                return record
            self._warn(f"tool call parent {parent_message_id!r} is not an assistant message")
        last = self.records.get(self._last_message.get(scope, ""))
        if last is not None and last.role is Role.ASSISTANT and last.owned:
            return last
        record, _ = self._message_for(None, Role.ASSISTANT, event)
        record.implicit = True
        return record

    def _adopt_message(self, agui_id: str, uuid: UUID) -> FoldRecord:
        record = FoldRecord(
            key=f"m:{agui_id}",
            kind=RecordKind.MESSAGE,
            order=next(self._order),
            agui_id=agui_id,
            role=Role.ASSISTANT,
            status=MessageStatus.COMPLETE,
            in_progress=False,
            owned=False,
            uuid=uuid,
        )
        self._adopted(record)
        return record

    def _adopt_call(self, tool_call_id: str) -> FoldRecord | None:
        stored = self._pending_calls.pop(tool_call_id, None)
        if stored is None:
            return None
        record = FoldRecord(
            key=f"t:{tool_call_id}",
            kind=RecordKind.TOOL_CALL,
            order=next(self._order),
            agui_id=tool_call_id,
            name=stored.name,
            status=stored.status,
            in_progress=False,
            owned=False,
            uuid=stored.uuid,
        )
        self._adopted(record)
        return record

    def _adopted(self, record: FoldRecord) -> None:
        self.records[record.key] = record
        # It may replace a record under its key: forget the fast paths' lookups.
        self._text_ids.clear()
        self._tool_ids.clear()
        self._reasoning_ids.clear()

    def _open_call(
        self, tool_call_id: str, name: str | None, parent_message_id: str | None, event: BaseEvent
    ) -> FoldRecord | None:
        if tool_call_id in self._stored_ids:
            self._warn(f"tool call id {tool_call_id!r} is already stored in the chat; ignored")
            return None
        parent = self._container(parent_message_id, event)
        record = self._open(
            RecordKind.TOOL_CALL,
            f"t:{tool_call_id}",
            event,
            agui_id=tool_call_id,
            parent_key=parent.key,
        )
        record.name = name or ""
        return record

    def _call_target(self, tool_call_id: str, event: BaseEvent, what: str) -> FoldRecord | None:
        record = self.tool_call(tool_call_id)
        if record is None:
            self._warn(f"{what} for unknown tool call {tool_call_id!r}; the call was opened")
            record = self._open_call(tool_call_id, None, None, event)
        return record

    def _on_tool_start(self, event: ToolCallStartEvent) -> None:
        record = self.tool_call(event.tool_call_id)
        if record is not None:
            self._warn(f"TOOL_CALL_START repeated for tool call {event.tool_call_id!r}")
            if not record.name and record.owned:
                record.name = event.tool_call_name
                self._touch(record)
            return
        self._open_call(event.tool_call_id, event.tool_call_name, event.parent_message_id, event)

    def _on_tool_args(self, event: ToolCallArgsEvent) -> None:
        record = self._call_target(event.tool_call_id, event, "TOOL_CALL_ARGS")
        if record is not None and record.owned:
            record.text.append(event.delta)
            self._touch(record, content=True)

    def _on_tool_end(self, event: ToolCallEndEvent) -> None:
        record = self.tool_call(event.tool_call_id)
        if record is None:
            self._warn(f"TOOL_CALL_END for unknown tool call {event.tool_call_id!r}; ignored")
            return
        self._close(record)

    def _on_tool_chunk(self, event: ToolCallChunkEvent) -> None:
        current = self.records.get(self._tool_chunk) if self._tool_chunk else None
        call_id = event.tool_call_id
        if call_id is not None and (current is None or current.agui_id != call_id):
            self._close_chunk("_tool_chunk")
            current = self.tool_call(call_id) or self._open_call(
                call_id, event.tool_call_name, event.parent_message_id, event
            )
            self._tool_chunk = current.key if current is not None else None
        elif current is None:
            self._warn("TOOL_CALL_CHUNK without a tool call id and no open call; ignored")
            return
        if current is not None and current.owned and event.delta:
            current.text.append(event.delta)
            self._touch(current, content=True)

    def _set_result(
        self, record: FoldRecord, content: str | Sequence[Any], message_id: str
    ) -> None:
        text, as_json = tool_result_text(content)
        record.result, record.result_message_id = text, message_id
        if as_json:
            record.metadata["result_content_parts"] = True
        self.known_ids.add(message_id)
        self._touch(record, content=True)
        if record.in_progress:
            self._close(record)
        else:
            self._changes.closed.append(record)
            self._boundary = self._changes.boundary = True
        if not record.owned:
            record.status = MessageStatus.COMPLETE

    def _on_tool_result(self, event: ToolCallResultEvent) -> None:
        record = self.tool_call(event.tool_call_id) or self._adopt_call(event.tool_call_id)
        if record is None:
            record = self._call_target(event.tool_call_id, event, "TOOL_CALL_RESULT")
        if record is None:
            return
        if record.result_message_id is not None:
            self._warn(f"tool call {event.tool_call_id!r} already has a result; replaced")
        self._set_result(record, event.content, event.message_id)

    # --- reasoning -----------------------------------------------------------------------

    def _open_reasoning(self, agui_id: str | None, event: BaseEvent | None) -> FoldRecord:
        """Open a reasoning message and its one reasoning step; return the step."""
        message, _ = self._message_for(agui_id, Role.REASONING, event)
        step_key = f"r:{agui_id}" if agui_id is not None else f"r{message.key[1:]}"
        step = self._open(
            RecordKind.REASONING, step_key, event, agui_id=message.agui_id, parent_key=message.key
        )
        if self._span is not None:
            self._spans[self._span].append(message.key)
            step.name = self._span_title
            if self._span != agui_id:
                step.metadata["reasoning_span_id"] = self._span
        return step

    def _reasoning_target(self, agui_id: str, event: BaseEvent, what: str) -> FoldRecord:
        step = self.reasoning(agui_id)
        if step is None:
            self._warn(f"{what} for unknown reasoning message {agui_id!r}; it was opened")
            step = self._open_reasoning(agui_id, event)
        return step

    def _append_reasoning(self, step: FoldRecord, delta: str | None) -> None:
        if delta:
            step.text.append(delta)
            self._touch(step, content=True)

    def _on_reasoning_start(self, event: ReasoningStartEvent) -> None:
        self._span = event.message_id
        self._spans.setdefault(event.message_id, [])
        title = (event.metadata or {}).get(THINKING_TITLE_METADATA_KEY)
        self._span_title = title if isinstance(title, str) else None

    def _on_reasoning_message_start(self, event: ReasoningMessageStartEvent) -> None:
        if self.reasoning(event.message_id) is not None:
            self._warn(f"REASONING_MESSAGE_START repeated for {event.message_id!r}")
            return
        self._open_reasoning(event.message_id, event)

    def _on_reasoning_content(self, event: ReasoningMessageContentEvent) -> None:
        step = self._reasoning_target(event.message_id, event, "REASONING_MESSAGE_CONTENT")
        self._append_reasoning(step, event.delta)

    def _on_reasoning_message_end(self, event: ReasoningMessageEndEvent) -> None:
        step = self.reasoning(event.message_id)
        if step is None:
            self._warn(f"REASONING_MESSAGE_END for unknown message {event.message_id!r}; ignored")
            return
        self._close(step)

    def _on_reasoning_chunk(self, event: ReasoningMessageChunkEvent) -> None:
        agui_id = event.message_id
        current = self.records.get(self._reasoning_chunk) if self._reasoning_chunk else None
        if agui_id is not None and (current is None or current.agui_id != agui_id):
            self._close_chunk("_reasoning_chunk")
            current = self.reasoning(agui_id) or self._open_reasoning(agui_id, event)
            self._reasoning_chunk = current.key
        elif current is None:
            self._warn("REASONING_MESSAGE_CHUNK without an id opened an anonymous reasoning step")
            current = self._open_reasoning(None, event)
            self._reasoning_chunk = current.key
        self._append_reasoning(current, event.delta)

    def _on_reasoning_end(self, event: ReasoningEndEvent) -> None:
        keys = self._spans.pop(event.message_id, None)
        if keys is None:
            self._warn(f"REASONING_END for unknown reasoning span {event.message_id!r}; ignored")
            return
        if self._span == event.message_id:
            self._span = self._span_title = None
        for key in keys:
            record = self.records[key]
            for step in self.children(record):
                self._close(step)
            self._close(record)

    def _on_encrypted_value(self, event: ReasoningEncryptedValueEvent) -> None:
        entity, value = event.entity_id, event.encrypted_value
        if event.subtype == "tool-call":
            call = self.tool_call(entity)
            if call is None or not call.owned:
                self._warn(f"encrypted value for unknown tool call {entity!r}; ignored")
                return
            call.metadata["encrypted_value"] = value
            self._touch(call)
            return
        target = self.reasoning(entity) or self.message(entity)
        if target is None:
            if entity != self._span:
                self._warn(f"encrypted value for unknown message {entity!r}; opened as reasoning")
            target = self._open_reasoning(entity, event)
        target.encrypted_value = value
        self._touch(target)

    # --- state, activities, snapshots ----------------------------------------------------

    def _on_state_snapshot(self, event: StateSnapshotEvent) -> None:
        self.state = copy.deepcopy(event.snapshot)
        self.state_version += 1

    def _on_state_delta(self, event: StateDeltaEvent) -> None:
        try:
            self.state = apply_json_patch(self.state, event.delta)
        except Exception as exc:  # any patch failure: skip it, keep the last good state
            self._warn(f"STATE_DELTA did not apply ({exc}); skipped")
            return
        self.state_version += 1

    def _activity(self, message_id: str, activity_type: str, event: BaseEvent) -> FoldRecord:
        record, opened = self._message_for(message_id, Role.ACTIVITY, event)
        if opened:
            record.activity_type = activity_type
            record.activity_content = {}
        return record

    def _on_activity_snapshot(self, event: ActivitySnapshotEvent) -> None:
        existed = self._find(event.message_id, Role.ACTIVITY) is not None
        record = self._activity(event.message_id, event.activity_type, event)
        if existed and event.replace is False:
            return
        record.activity_content = copy.deepcopy(event.content)
        self._touch(record, content=True)

    def _on_activity_delta(self, event: ActivityDeltaEvent) -> None:
        if self._find(event.message_id, Role.ACTIVITY) is None:
            self._warn(f"ACTIVITY_DELTA for unknown activity {event.message_id!r}; it was opened")
        record = self._activity(event.message_id, event.activity_type, event)
        try:
            record.activity_content = apply_json_patch(record.activity_content or {}, event.patch)
        except Exception as exc:  # any patch failure: skip it, keep the last good content
            self._warn(f"ACTIVITY_DELTA for {event.message_id!r} did not apply ({exc}); skipped")
            return
        self._touch(record, content=True)

    def _on_messages_snapshot(self, event: MessagesSnapshotEvent) -> None:
        for message in event.messages:
            if message.id in self.known_ids:
                continue
            if isinstance(message, ToolMessage):
                self._snapshot_tool_result(message)
                continue
            self._snapshot_message(message)

    def _snapshot_tool_result(self, message: ToolMessage) -> None:
        call = self.tool_call(message.tool_call_id) or self._adopt_call(message.tool_call_id)
        if call is None or call.result_message_id is not None:
            self._warn(f"snapshot tool message {message.id!r} answers no pending call; skipped")
            return
        self._set_result(call, message.content, message.id)

    def _snapshot_message(self, message: Any) -> None:
        if isinstance(message, ReasoningMessage):
            step = self._open_reasoning(message.id, None)
            step.text.replace(message.content)
            step.encrypted_value = message.encrypted_value
            self._close(step)
            return
        record, _ = self._message_for(message.id, Role(message.role), None)
        if message.subagent_run_id is not None:
            record.metadata["subagent_run_id"] = message.subagent_run_id
        if message.metadata:
            record.metadata[AGUI_METADATA_KEY] = message.metadata
        if isinstance(message, AguiActivityMessage):
            record.activity_type = message.activity_type
            record.activity_content = copy.deepcopy(message.content)
        elif isinstance(message, UserMessage | SystemMessage | DeveloperMessage):
            try:
                create = message_create_from_agui(message, UUID(int=0), self.run_id)
            except InvalidInputError as exc:
                self._warn(f"snapshot message {message.id!r}: {exc}; stored as text only")
                create = None
            if create is not None:
                record.text.replace(create.content)
                record.content_parts = create.content_parts
            record.name, record.encrypted_value = message.name, message.encrypted_value
        elif isinstance(message, AssistantMessage):
            record.text.replace(message.content or "")
            record.name, record.encrypted_value = message.name, message.encrypted_value
            self._snapshot_calls(record, message)
        self._close(record)

    def _snapshot_calls(self, record: FoldRecord, message: AssistantMessage) -> None:
        for call in message.tool_calls or ():
            if call.id in self.known_ids:
                continue
            child = self._open(
                RecordKind.TOOL_CALL, f"t:{call.id}", None, agui_id=call.id, parent_key=record.key
            )
            child.name = call.function.name
            child.text.replace(call.function.arguments)
            if call.encrypted_value is not None:
                child.metadata["encrypted_value"] = call.encrypted_value
            self._close(child)

    # --- subagents -----------------------------------------------------------------------

    def _on_subagent_started(self, event: SubagentStartedEvent) -> None:
        info = {"name": event.name, "description": event.description}
        self._subagents[event.subagent_run_id] = info
        call = self.tool_call(event.parent_tool_call_id) if event.parent_tool_call_id else None
        if call is not None and call.owned:
            call.metadata.setdefault("subagent_run_ids", []).append(event.subagent_run_id)
            self._touch(call)

    def _subagent_records(self, subagent_run_id: str) -> list[FoldRecord]:
        return [
            r
            for r in self.records.values()
            if r.owned and r.in_progress and r.subagent_run_id == subagent_run_id
        ]

    def _on_subagent_finished(self, event: SubagentFinishedEvent) -> None:
        for record in self._subagent_records(event.subagent_run_id):
            self._close(record)

    def _on_subagent_error(self, event: SubagentErrorEvent) -> None:
        error = {k: v for k, v in {"message": event.message, "code": event.code}.items() if v}
        for record in self._subagent_records(event.subagent_run_id):
            record.metadata["subagent_error"] = error
            self._close(record, MessageStatus.ERRORED)

    _HANDLERS: ClassVar[dict[str, Callable[[ConversationFold, Any], None]]] = {
        "RUN_STARTED": _on_run_started,
        "RUN_FINISHED": _on_run_finished,
        "RUN_ERROR": _on_run_error,
        "STEP_STARTED": _on_step_started,
        "STEP_FINISHED": _on_step_finished,
        "TEXT_MESSAGE_START": _on_text_start,
        "TEXT_MESSAGE_CONTENT": _on_text_content,
        "TEXT_MESSAGE_END": _on_text_end,
        "TEXT_MESSAGE_CHUNK": _on_text_chunk,
        "TOOL_CALL_START": _on_tool_start,
        "TOOL_CALL_ARGS": _on_tool_args,
        "TOOL_CALL_END": _on_tool_end,
        "TOOL_CALL_CHUNK": _on_tool_chunk,
        "TOOL_CALL_RESULT": _on_tool_result,
        "REASONING_START": _on_reasoning_start,
        "REASONING_MESSAGE_START": _on_reasoning_message_start,
        "REASONING_MESSAGE_CONTENT": _on_reasoning_content,
        "REASONING_MESSAGE_END": _on_reasoning_message_end,
        "REASONING_MESSAGE_CHUNK": _on_reasoning_chunk,
        "REASONING_END": _on_reasoning_end,
        "REASONING_ENCRYPTED_VALUE": _on_encrypted_value,
        "STATE_SNAPSHOT": _on_state_snapshot,
        "STATE_DELTA": _on_state_delta,
        "ACTIVITY_SNAPSHOT": _on_activity_snapshot,
        "ACTIVITY_DELTA": _on_activity_delta,
        "MESSAGES_SNAPSHOT": _on_messages_snapshot,
        "SUBAGENT_STARTED": _on_subagent_started,
        "SUBAGENT_FINISHED": _on_subagent_finished,
        "SUBAGENT_ERROR": _on_subagent_error,
    }


StorageState = ConversationFold
"""The seed's name for the state handlers and build hooks receive."""
