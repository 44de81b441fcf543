"""Connecting to a thread: what a client receives, as AG-UI events, before and after.

A client that connects to a thread, or rejoins a run, is sent one AG-UI run: the run's
``RUN_STARTED``, the thread's ``MESSAGES_SNAPSHOT`` and ``STATE_SNAPSHOT``, then the run's
events so far and the rest as they come; or ``RUN_FINISHED`` (or the ``RUN_ERROR`` of a
run that ended badly) when no run is live. This module decides those events and finds
the run, here or, on PostgreSQL, in another process; the server encodes and streams them.

A run of this process is read from memory. A run of another process is found through the
caller's own chat (never by thread id alone, which another user may share) and read from
the relayed events in the store.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID, uuid4

from ag_ui.core import (
    BaseEvent,
    EventType,
    MessagesSnapshotEvent,
    ReasoningMessageStartEvent,
    RunErrorEvent,
    StateSnapshotEvent,
    TextMessageStartEvent,
    ToolCallStartEvent,
)
from ag_ui.core import Message as AGUIMessage
from pydantic import TypeAdapter

from threadstore._steps import off_loop
from threadstore.agui._agent_input import kept_translation
from threadstore.agui._distributed import DistributedRunManager
from threadstore.agui._run_handle import EventsDroppedError, RunHandle
from threadstore.codec import (
    TRANSLATION,
    StreamReader,
    now_ms,
    run_finished,
    run_started,
    translate_messages,
)
from threadstore.errors import ErrorCodes
from threadstore.models import Chat, Message, Role, RunStatus
from threadstore.store import HistoryView, Store

__all__ = [
    "Connection",
    "EventBatches",
    "Hydration",
    "NumberedEvent",
    "Reopen",
    "RunEvents",
    "ThreadConnector",
    "before_run",
    "idle_hydration",
    "opened_messages",
    "run_hydration",
    "settled_hydration",
]

NumberedEvent = tuple[int | None, BaseEvent]
"""An event and its number in its run; ``None`` for an event made for the connection."""
EventBatches = AsyncGenerator[tuple[int, Sequence[BaseEvent]], None]
"""A run's events a batch at a time: ``(number of the batch's first event, events)``."""
Reopen = Callable[[int], Awaitable[EventBatches | None]]
"""Opens a run's events after the given id again (``None`` once it cannot be followed)."""


@dataclass(frozen=True, slots=True)
class Hydration:
    """A connecting client's first events: ``lead``, the thread's two snapshots, ``rest``.

    The ``MESSAGES_SNAPSHOT`` is given as its messages: a long chat's is serialized a
    message at a time by whoever sends it, so the event loop is never held for long.
    """

    lead: list[NumberedEvent]
    """The ``RUN_STARTED`` (with its number when it is the run's own)."""
    messages: list[AGUIMessage]
    """The ``MESSAGES_SNAPSHOT``'s messages."""
    state: StateSnapshotEvent
    """The thread's state."""
    rest: list[NumberedEvent]
    """The run's events so far, with their numbers; or the end of a run not live."""

    def events(self) -> list[NumberedEvent]:
        """Every event in order, the ``MESSAGES_SNAPSHOT`` made whole."""
        snapshot = MessagesSnapshotEvent(messages=self.messages, timestamp=now_ms())
        return [*self.lead, (None, snapshot), (None, self.state), *self.rest]


@dataclass(frozen=True, slots=True)
class RunEvents:
    """A run's numbered events after ``after``, and how to follow them again."""

    stream: EventBatches | None = None
    """The events after ``after``, already open; else ``reopen`` opens them."""
    reopen: Reopen | None = None
    """Opens the events after a given number again: for a stream that picks up later."""
    after: int = 0
    """The number of the last event the client has (0: none yet)."""

    @classmethod
    def local(cls, handle: RunHandle[Any], after: int = 0) -> RunEvents:
        """A run of this process: read from its log, a batch at a time, when first read."""

        async def reopen(after: int) -> EventBatches:
            return handle.numbered_batches(after)

        return cls(reopen=reopen, after=after)


@dataclass(frozen=True, slots=True)
class Connection:
    """What a connecting client is sent: the ``hydration``, then the run's ``events``."""

    hydration: Hydration
    events: RunEvents = field(default_factory=RunEvents)
    """The live run's events after those of the hydration (none for a run not live)."""


# --- what a client receives ----------------------------------------------------------------


async def idle_hydration(
    thread_id: str, chat: Chat | None, history: Sequence[Message]
) -> Hydration:
    """A thread with no live run: ``RUN_STARTED``, the snapshots, ``RUN_FINISHED``.

    The run is one made for the connection, with an id of its own.
    """
    run_id = f"connect-{uuid4().hex[:12]}"
    started = run_started(thread_id, run_id)
    finished = run_finished(thread_id, run_id)
    return await settled_hydration(chat, history, started, finished)


async def settled_hydration(
    chat: Chat | None, history: Sequence[Message], started: BaseEvent, end: BaseEvent
) -> Hydration:
    """``started``, the thread's snapshots, then ``end``: a run no process streams."""
    messages, state = await _snapshots(chat, history)
    return Hydration([(None, started)], messages, state, [(None, end)])


async def run_hydration(
    chat: Chat | None,
    history: Sequence[Message],
    run_id: str,
    head: Sequence[tuple[int, BaseEvent]],
) -> Hydration:
    """The run's ``RUN_STARTED``, the snapshots, then the rest of ``head`` (the run so far).

    ``head`` starts at the run's first event, so every message the run produced (all
    but its input) is left to its events. The history may hold records of events not in
    ``head`` (a relayed ``head`` lags the run's writer) and records no event names (the
    message the store opens for a tool call without a parent).
    """
    history = before_run(history, run_id)
    lead: list[NumberedEvent] = []
    if head and head[0][1].type == EventType.RUN_STARTED:
        lead.append(head[0])
        head = head[1:]
    messages, state = await _snapshots(chat, history, [event for _, event in head])
    rest: list[NumberedEvent] = []
    snapshot_seen = False
    for event_id, event in head:
        snapshot_seen = snapshot_seen or event.type == EventType.STATE_SNAPSHOT
        # Deltas from before the run's own snapshot are already folded into the
        # stored state just sent; replaying them would apply them twice.
        if event.type == EventType.STATE_DELTA and not snapshot_seen:
            continue
        rest.append((event_id, event))
    return Hydration(lead, messages, state, rest)


def before_run(history: Sequence[Message], run_id: str) -> Sequence[Message]:
    """``history`` without what run ``run_id`` wrote but its input (its events replay it).

    The run's records are the end of the active branch while it runs, so the usual
    answer is a prefix of the store's kept history, whose kept translation then serves.
    """
    for index, message in enumerate(history):
        if message.run_id == run_id and message.role != Role.USER:
            rest = history[index:]
            if all(m.run_id == run_id and m.role != Role.USER for m in rest):
                return (
                    history.prefix(index) if isinstance(history, HistoryView) else history[:index]
                )
            return [m for m in history if m.run_id != run_id or m.role == Role.USER]
    return history


async def _snapshots(
    chat: Chat | None, history: Sequence[Message], replayed: Sequence[BaseEvent] = ()
) -> tuple[list[AGUIMessage], StateSnapshotEvent]:
    """The thread's snapshots for a stream that then replays the ``replayed`` events.

    Messages those events touch are left out of the history, which the events rebuild,
    so none appears twice.
    """
    if isinstance(history, HistoryView):  # kept with the store's history
        messages = kept_translation(history)
    else:
        messages = await off_loop(history, translate_messages, history)
    if replayed:
        exclude = {i for event in replayed for i in _message_ids(event)}
        messages = [m for m in messages if m.id not in exclude] + opened_messages(replayed)
    state = chat.state if chat is not None and chat.state is not None else {}
    return messages, StateSnapshotEvent(snapshot=state, timestamp=now_ms())


def _message_ids(event: BaseEvent) -> list[str]:
    ids = [getattr(event, "message_id", None), getattr(event, "parent_message_id", None)]
    return [i for i in ids if isinstance(i, str)]


_MESSAGE: TypeAdapter[AGUIMessage] = TypeAdapter(AGUIMessage)


def opened_messages(events: Sequence[BaseEvent]) -> list[AGUIMessage]:
    """The messages ``events`` open, empty, in the order an AG-UI client creates them.

    A client that reconnects after its stream dropped holds part of the run already,
    and AG-UI clients append to a message whose START names an id they hold, and keep
    reasoning messages a snapshot does not name when it names none. Named empty in the
    snapshot, each is reset there and filled by the replayed events as a new one would
    be, at the place the client would have created it. The events are read as the
    store read them (``codec.StreamReader``); an id only that reading made up is one the
    client never saw, so it names none.
    """
    opened: dict[str, dict[str, Any]] = {}
    named = {i for event in events for i in _message_ids(event)}
    named |= {c for event in events if isinstance(c := getattr(event, "tool_call_id", None), str)}

    def open_once(message_id: str, event: BaseEvent, **fields: Any) -> None:
        if message_id not in opened and message_id in named:
            subagent = getattr(event, "subagent_run_id", None)
            owner = {"subagentRunId": subagent} if subagent is not None else {}
            opened[message_id] = {"id": message_id, **fields, **owner}

    reader = StreamReader()
    calls: set[str] = set()
    for raw in events:
        reader, read = reader.read(raw)
        for event in read:
            if isinstance(event, TextMessageStartEvent):
                named_ = {"name": event.name} if event.name is not None else {}
                open_once(
                    event.message_id, event, role=event.role or "assistant", content="", **named_
                )
            elif isinstance(event, ReasoningMessageStartEvent):
                open_once(event.message_id, event, role="reasoning", content="")
            elif isinstance(event, ToolCallStartEvent) and event.tool_call_id not in calls:
                calls.add(event.tool_call_id)
                parent = event.parent_message_id
                holder = opened.get(parent) if parent else None
                if holder is None:
                    # A client makes the named parent, or one named for the call.
                    open_once(parent or event.tool_call_id, event, role="assistant", toolCalls=[])
                elif holder["role"] != "assistant":
                    open_once(event.tool_call_id, event, role="assistant", toolCalls=[])
    return [_MESSAGE.validate_python(message) for message in opened.values()]


_END_CODES = {RunStatus.INTERRUPTED: ErrorCodes.CANCELLED}
"""The ``RUN_ERROR`` code replayed for a settled run's status (else ``INTERNAL_ERROR``)."""


# --- finding the run -----------------------------------------------------------------------


class ThreadConnector:
    """Connects a user to their threads and runs, wherever the runs are live."""

    __slots__ = ("manager", "store")

    def __init__(self, manager: DistributedRunManager[Any], store: Store) -> None:
        self.manager = manager
        self.store = store

    async def connect(self, user: UUID, thread_id: str) -> Connection | None:
        """The user's thread: its history and state, then its live run if it has one.

        ``None`` when the user has no such thread and no run of it is live here.
        """
        live = self._live_run(user, thread_id)
        chat = await self.store.get_chat_by_thread_id(user, thread_id)
        if chat is None and live is None:
            return None
        history = await self._history(chat)
        if live is not None:
            return await _join_local(chat, history, live)
        if chat is not None and self.manager.relay is not None:
            # The chat's run live in another process, joined, if there is one.
            live_ids = await self.manager.live_chat_runs(chat.chat_uuid)
            if live_ids and (joined := await self._join_relayed(chat, history, live_ids[0])):
                return joined
        return Connection(await idle_hydration(thread_id, chat, history))

    async def rejoin(self, user: UUID, thread_id: str, run_id: str) -> Connection | None:
        """The user's run as :meth:`connect` gives it, wherever it runs; ``None`` if not."""
        handle = self.manager.get(thread_id, run_id, user_uuid=user)  # live or just finished
        chat = await self.store.get_chat_by_thread_id(user, thread_id)
        history = await self._history(chat)
        if handle is not None:
            return await _join_local(chat, history, handle)
        if chat is None:
            return None
        return await self._join_relayed(chat, history, run_id)

    async def follow(self, user: UUID, thread_id: str, run_id: str, after: int) -> RunEvents | None:
        """The user's run's events after ``after``, wherever it runs; ``None`` if none.

        Opens them now, so a bad ``after`` raises here rather than in the stream.
        """
        manager = self.manager
        handle = manager.get(thread_id, run_id, user_uuid=user)
        if handle is not None:  # opened now, so that ``after`` is checked now
            local = RunEvents.local(handle, after)
            return RunEvents(handle.numbered_batches(after), local.reopen, after)

        async def reopen(after: int) -> EventBatches | None:
            events = await manager.resume(thread_id, run_id, after, user_uuid=user)
            return None if events is None else _one_by_one(events)

        stream = await reopen(after)
        if stream is None:
            return None
        return RunEvents(stream, reopen, after)

    async def settled(self, user: UUID, thread_id: str, run_id: str) -> Connection | None:
        """A run the store knows but no process streams any more, as one whole AG-UI run.

        ``RUN_STARTED``, the thread's snapshots (what was stored of it), then the end its
        record gives: so a run whose process is gone still answers. A run recorded
        running elsewhere and live gives ``None``: its events are that process's.
        """
        chat = await self.store.get_chat_by_thread_id(user, thread_id)
        run = None if chat is None else await self.store.get_run(chat.chat_uuid, run_id)
        if chat is None or run is None:
            return None
        if run.status == RunStatus.RUNNING and self.manager.gone(run):
            await self.manager.end_stale_run(run)
            run = await self.store.get_run(chat.chat_uuid, run_id) or run
        if run.status == RunStatus.RUNNING:
            return None
        started = run_started(thread_id, run_id)
        end: BaseEvent = (
            run_finished(thread_id, run_id)
            if run.status == RunStatus.COMPLETE
            else RunErrorEvent(
                message=f"run {run_id} ended {run.status}"
                + (f": {run.error}" if run.error else ""),
                code=_END_CODES.get(run.status, ErrorCodes.INTERNAL_ERROR),
                timestamp=now_ms(),
            )
        )
        history = await self._history(chat)
        return Connection(await settled_hydration(chat, history, started, end))

    async def _history(self, chat: Chat | None) -> Sequence[Message]:
        """The chat's active branch: the store's kept history (read-only, extended by what
        changed since its last read), as a run reads it."""
        if chat is None:
            return []
        return await self.store.messages.read_history(chat.chat_uuid, TRANSLATION)

    def _live_run(self, user: UUID, thread_id: str) -> RunHandle[Any] | None:
        runs = [
            handle
            for handle in self.manager.live_runs()
            if handle.thread_id == thread_id and handle.user_uuid == user
        ]
        return runs[-1] if runs else None

    async def _join_relayed(
        self, chat: Chat, history: Sequence[Message], run_id: str
    ) -> Connection | None:
        """The chat's run ``run_id`` joined from its relayed events; ``None`` if none."""
        manager, relay = self.manager, self.manager.relay
        if relay is None:
            return None
        # Read after the history: the events stored so far, then the rest as they come.
        head = await relay.read_events(chat.chat_uuid, run_id)
        seen = head[-1][0] if head else 0
        rest = await manager.resume_chat_run(chat.chat_uuid, run_id, seen)
        if rest is None:
            return None
        if not head:
            # The run's first events are still on their way; RUN_STARTED must lead.
            first = await anext(rest, None)
            if first is None:
                return None
            head, seen = [first], first[0]
        hydration = await run_hydration(chat, history, run_id, head)

        async def reopen(after: int) -> EventBatches | None:
            events = await manager.resume_chat_run(chat.chat_uuid, run_id, after)
            return None if events is None else _one_by_one(events)

        return Connection(hydration, RunEvents(_one_by_one(rest), reopen, seen))


async def _join_local(
    chat: Chat | None, history: Sequence[Message], handle: RunHandle[Any]
) -> Connection:
    # The history was read before this point, so everything it holds of the live run
    # came from events up to ``seen``; those messages are left out of the snapshot and
    # arrive as the run's own events instead, never twice.
    seen = handle.last_event_id
    first = handle.first_event_id - 1
    head: list[tuple[int, BaseEvent]] = []
    try:
        if seen > first:
            pairs = handle.numbered_events(first)
            try:
                async for pair in pairs:
                    head.append(pair)
                    if pair[0] >= seen:
                        break
            finally:
                await pairs.aclose()
    except EventsDroppedError:  # pragma: no cover - the server keeps whole logs
        head = []
    hydration = await run_hydration(chat, history, handle.run_id, head)
    return Connection(hydration, RunEvents.local(handle, seen))


async def _one_by_one(events: AsyncIterator[tuple[int, BaseEvent]]) -> EventBatches:
    """``events`` as batches of one: a run read through the manager (a relayed one)."""
    try:
        async for event_id, event in events:
            yield event_id, (event,)
    finally:
        # A relayed stream holds a wake-up registration until it is closed.
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()
