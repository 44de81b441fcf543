"""The AG-UI endpoints: run, resume, cancel and connect.

``POST /agui`` takes a ``RunAgentInput`` and answers with the run's event stream.
Runs belong to the run manager, not to the request: a client that disconnects does
not stop the run or its persistence, and can pick the stream up again with
``GET .../events`` and ``Last-Event-ID``.

A run of this process is read from memory. On PostgreSQL, a run of another server
process is found through the caller's own chat (never by thread id alone, which
another user may share) and read from the relayed events in the store.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Annotated, Any
from uuid import UUID, uuid4

from ag_ui.core import (
    BaseEvent,
    EventType,
    MessagesSnapshotEvent,
    ReasoningMessageStartEvent,
    RunAgentInput,
    RunErrorEvent,
    StateSnapshotEvent,
    TextMessageStartEvent,
    ToolCallStartEvent,
)
from ag_ui.core import Message as AGUIMessage
from fastapi import APIRouter, Header, HTTPException, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, TypeAdapter

from threadstore import _telemetry
from threadstore._steps import joined_in_steps, off_loop
from threadstore.agui import (
    EventsDroppedError,
    RunHandle,
    event_json,
    kept_translation,
    wire_json,
)
from threadstore.codec import TRANSLATION, StreamReader, translate_messages
from threadstore.errors import ErrorCodes, InvalidInputError
from threadstore.models import Chat, Message, Role, Run, RunStatus, utcnow
from threadstore.server._deps import AppState, CurrentUser, ServerState
from threadstore.server._errors import error_response
from threadstore.server._events import now_ms, run_finished, run_started
from threadstore.server._limits import MAX_CURSOR, check_id, check_run_input
from threadstore.server._run_gate import RunConflictError
from threadstore.server._sse import close_iterator, encode_frame, event_stream_response
from threadstore.store import HistoryView

__all__ = ["CancelResult", "router"]

router = APIRouter(prefix="/agui", tags=["AG-UI"])

NumberedEvents = AsyncGenerator[tuple[int, BaseEvent], None]
EventBatches = AsyncGenerator[tuple[int, Sequence[BaseEvent]], None]
"""A run's events a batch at a time: ``(number of the batch's first event, events)``."""
Reopen = Callable[[int], Awaitable[EventBatches | None]]
"""Opens a run's events after the given id again (``None`` once it cannot be followed)."""

MAX_EVENTS_PER_WRITE = 256
"""At most this many events' frames go out in one write (one HTTP chunk).

A reader that wakes to several new events writes them together: the response's cost
per write (the ASGI send, HTTP framing, the socket call, and the client's read) is then
paid once for them all. The cap keeps a resume from early in a long run from building
one huge chunk.
"""

_STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "AG-UI events as server-sent events; each frame's `id` is its number "
        "in the run.",
        "content": {"text/event-stream": {}},
    }
}


class CancelResult(BaseModel):
    """What a cancel request found."""

    thread_id: str
    run_id: str
    cancelled: bool
    """True when the run was live and is now cancelled."""
    status: RunStatus
    """The run's status after the request."""


class _RunFrames:
    """A stream's frames: ``head``, then those of the run's events after ``after``.

    Each call resumes after the last frame yielded, as the keep-alives need: the
    first call reads ``stream`` and later ones what ``reopen`` gives.
    """

    def __init__(
        self,
        head: Sequence[bytes] = (),
        *,
        stream: EventBatches | None = None,
        reopen: Reopen | None = None,
        after: int = 0,
        json_of: Callable[[int, BaseEvent], str] | None = None,
    ) -> None:
        self._head = deque(head)
        self._stream = stream
        self._reopen = reopen
        self._sent = after
        self._json_of = json_of
        """A local run's shared JSON of its events (``RunHandle.json_of``), if any."""

    async def __call__(self) -> AsyncIterator[bytes]:
        """Yield the frames not yet yielded."""
        head = self._head
        while head:
            yield head.popleft()
        stream, self._stream = self._stream, None
        if stream is None and self._reopen is not None:
            stream = await self._reopen(self._sent)
        if stream is None:
            return
        json_of = self._json_of
        try:
            async for first, events in stream:
                for start in range(0, len(events), MAX_EVENTS_PER_WRITE):
                    chunk = events[start : start + MAX_EVENTS_PER_WRITE]
                    frames = []
                    for event_id, event in enumerate(chunk, first + start):
                        text = None if json_of is None else json_of(event_id, event)
                        frames.append(encode_frame(event, event_id, text))
                    self._sent = first + start + len(chunk) - 1
                    yield b"".join(frames)
        finally:
            # A relayed stream holds a wake-up registration until it is closed.
            await close_iterator(stream)


async def _one_by_one(events: NumberedEvents) -> EventBatches:
    """``events`` as batches of one: a run read through the manager (a relayed one)."""
    try:
        async for event_id, event in events:
            yield event_id, (event,)
    finally:
        await close_iterator(events)


def _local_reopen(handle: RunHandle[Any]) -> Reopen:
    async def reopen(after: int) -> EventBatches:
        return handle.numbered_batches(after)

    return reopen


async def _run_frames(
    state: ServerState, user: UUID, thread_id: str, run_id: str, after: int
) -> _RunFrames | None:
    """The caller's run's frames after ``after``, wherever it runs; ``None`` if none.

    Checks ``after`` now, so a bad id is a 4xx rather than a broken stream.
    """
    manager = state.manager
    handle = manager.get(thread_id, run_id, user_uuid=user)
    if handle is not None:  # a run of this process: read from its log, a batch at a time
        local = _local_reopen(handle)
        return _RunFrames(stream=await local(after), reopen=local, after=after)

    async def reopen(after: int) -> EventBatches | None:
        events = await manager.resume(thread_id, run_id, after, user_uuid=user)
        return None if events is None else _one_by_one(events)

    stream = await reopen(after)
    if stream is None:
        return None
    return _RunFrames(stream=stream, reopen=reopen, after=after)


def _stream(state: ServerState, frames: _RunFrames) -> StreamingResponse:
    return event_stream_response(frames, keepalive_interval=state.keepalive_interval)


@router.post(
    "",
    response_class=StreamingResponse,
    responses={
        **_STREAM_RESPONSES,
        409: {"description": "The run id already ran, or the thread has a live run."},
    },
    summary="Run",
)
async def run_agent(run_input: RunAgentInput, state: AppState, user: CurrentUser) -> Any:
    """Start a run and stream its AG-UI events (the AG-UI HTTP convention).

    New messages in ``messages`` must be user messages; messages already stored are
    recognised by id, so clients may echo the whole history back. A run id runs once,
    and a thread has at most one live run: either answers 409 (``run_exists`` /
    ``run_live``) with the run's ``events_url``.
    """
    check_run_input(run_input, state.limits)
    try:
        handle = await state.runs.start(state, user, run_input)
    except RunConflictError as exc:
        return error_response(409, str(exc), code=exc.code, **exc.fields)
    return _stream(state, _RunFrames(reopen=_local_reopen(handle), json_of=handle.json_of))


def _check_run_ids(state: ServerState, thread_id: str, run_id: str) -> None:
    check_id("thread_id", thread_id, state.limits)
    check_id("run_id", run_id, state.limits)


def _resume_point(after: int | None, last_event_id: str | None) -> int:
    if last_event_id is not None and last_event_id.strip():
        try:
            value = int(last_event_id.strip())
        except ValueError:
            raise InvalidInputError(
                f"Last-Event-ID must be an event number, got {last_event_id[:40]!r}"
            ) from None
        if not 0 <= value <= MAX_CURSOR:
            raise InvalidInputError(f"Last-Event-ID must be between 0 and {MAX_CURSOR}")
        return value
    return after or 0


@router.get(
    "/threads/{thread_id}/runs/{run_id}/events",
    response_class=StreamingResponse,
    responses={
        **_STREAM_RESPONSES,
        204: {
            "description": "The run has ended and the client has its every event: nothing "
            "is left to send (a browser `EventSource` stops reconnecting)."
        },
    },
    summary="Resume a run's stream",
)
async def resume_run(
    thread_id: str,
    run_id: str,
    state: AppState,
    user: CurrentUser,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_CURSOR, description="Send the events after this number.")
    ] = None,
    last_event_id: Annotated[
        str | None, Header(description="Standard SSE reconnect header; wins over `after`.")
    ] = None,
    snapshots: Annotated[
        bool,
        Query(
            description="Start over as `/connect` does: the run's `RUN_STARTED`, the thread's "
            "snapshots, then the run's events (for clients that check event order and keep "
            "no event ids). `Last-Event-ID` is then ignored; `after` is refused."
        ),
    ] = False,
) -> Any:
    """Stream a live (or just finished) run's events after ``Last-Event-ID`` / ``after``.

    With ``snapshots=true`` the stream is one whole AG-UI run instead, as ``/connect``
    gives it for this run: ``RUN_STARTED``, ``MESSAGES_SNAPSHOT``, ``STATE_SNAPSHOT``,
    then the run's events.
    """
    _check_run_ids(state, thread_id, run_id)
    with _telemetry.span("threadstore.resume", **{"threadstore.run_id": run_id}):
        if snapshots:
            if after is not None:
                raise InvalidInputError(
                    "pass either after or snapshots=true: a stream with snapshots starts the "
                    "run over"
                )
            frames = await _rejoin(state, user, thread_id, run_id)
        else:
            point = _resume_point(after, last_event_id)
            handle = state.manager.get(thread_id, run_id, user_uuid=user)
            if handle is not None and handle.done and point == handle.last_event_id:
                # An empty stream would only make the client reconnect, for ever.
                return Response(status_code=204)
            frames = await _run_frames(state, user, thread_id, run_id, point)
        if frames is None:
            frames = await _settled_run(state, user, thread_id, run_id)
    if frames is None:
        raise HTTPException(
            404,
            detail=f"run {run_id} of thread {thread_id} is not live or recently finished; "
            "its stored messages are at /api/chats",
        )
    return _stream(state, frames)


@router.post(
    "/threads/{thread_id}/runs/{run_id}/cancel",
    response_model=CancelResult,
    summary="Cancel a run",
    responses={
        409: {"description": "The run is live in another server process (not on PostgreSQL)."}
    },
)
async def cancel_run(thread_id: str, run_id: str, state: AppState, user: CurrentUser) -> Any:
    """Cancel a live run; its unfinished records become ``interrupted`` before this returns."""
    _check_run_ids(state, thread_id, run_id)
    manager = state.manager
    handle = manager.get(thread_id, run_id, user_uuid=user)
    if handle is not None:
        cancelled = handle.cancel()
        await handle.wait()
        return CancelResult(
            thread_id=thread_id,
            run_id=run_id,
            cancelled=cancelled,
            status=handle.outcome or RunStatus.INTERRUPTED,
        )
    chat = await state.store.get_chat_by_thread_id(user, thread_id)
    run = await state.store.get_run(chat.chat_uuid, run_id) if chat is not None else None
    if chat is None or run is None:
        raise HTTPException(404, detail=f"run {run_id} of thread {thread_id} not found")
    cancelled = False
    if run.status == RunStatus.RUNNING and manager.gone(run):
        # Its process is gone: nothing runs it, so settling it is the whole cancel.
        await manager.end_stale_run(run)
        run = await state.store.get_run(chat.chat_uuid, run_id) or run
        cancelled = run.status == RunStatus.INTERRUPTED
    elif run.status == RunStatus.RUNNING:
        if not manager.beating(run):
            raise HTTPException(409, detail=_stale_run_detail(state, run))
        if manager.relay is None:
            raise HTTPException(
                409, detail=f"run {run_id} is live in another server process; cancel it there"
            )
        asked = await manager.cancel_chat_run(chat.chat_uuid, run_id, wait=True)
        run = await state.store.get_run(chat.chat_uuid, run_id) or run
        # True only when the run did stop: a request its owner never acted on cancels nothing.
        cancelled = asked and run.status != RunStatus.RUNNING
    return CancelResult(thread_id=thread_id, run_id=run_id, cancelled=cancelled, status=run.status)


async def _settled_run(
    state: ServerState, user: UUID, thread_id: str, run_id: str
) -> _RunFrames | None:
    """A run the store knows but no process streams any more, as one whole AG-UI run.

    ``RUN_STARTED``, the thread's snapshots (what was stored of it), then the end its
    record gives: so the events URL of a run whose process is gone still answers. A run
    recorded running elsewhere and live gives ``None``: its events are that process's.
    """
    chat = await state.store.get_chat_by_thread_id(user, thread_id)
    run = None if chat is None else await state.store.get_run(chat.chat_uuid, run_id)
    if chat is None or run is None:
        return None
    if run.status == RunStatus.RUNNING and state.manager.gone(run):
        await state.manager.end_stale_run(run)
        run = await state.store.get_run(chat.chat_uuid, run_id) or run
    if run.status == RunStatus.RUNNING:
        return None
    started = run_started(thread_id, run_id)
    end: BaseEvent = (
        run_finished(thread_id, run_id)
        if run.status == RunStatus.COMPLETE
        else RunErrorEvent(
            message=f"run {run_id} ended {run.status}" + (f": {run.error}" if run.error else ""),
            code=_END_CODES.get(run.status, ErrorCodes.INTERNAL_ERROR),
            timestamp=now_ms(),
        )
    )
    history = await _history(state, chat)
    frames = [encode_frame(started), *await _snapshot_frames(chat, history), encode_frame(end)]
    return _RunFrames(frames)


_END_CODES = {RunStatus.INTERRUPTED: ErrorCodes.CANCELLED}
"""The ``RUN_ERROR`` code replayed for a settled run's status (else ``INTERNAL_ERROR``)."""


def _stale_run_detail(state: ServerState, run: Run) -> str:
    """Why a run recorded running cannot be cancelled: its process stopped, and when it ends."""
    stale_at = run.heartbeat_at + timedelta(seconds=state.stale_after)
    if state.sweep_interval is None:
        when = "the next server start or `threadstore sweep`"
    else:
        taken_by = max(stale_at, utcnow()) + timedelta(seconds=state.sweep_interval)
        when = f"this server's sweep, by {taken_by.isoformat(timespec='seconds')}"
    return (
        f"run {run.run_id} is not live: its server process ({run.owner}) stopped heartbeating"
        f" at {run.heartbeat_at.isoformat(timespec='seconds')}; it is finalized as"
        f" interrupted once its heartbeat is {state.stale_after:g} s old"
        f" ({stale_at.isoformat(timespec='seconds')}), by {when}"
    )


@router.get(
    "/threads/{thread_id}/connect",
    response_class=StreamingResponse,
    responses=_STREAM_RESPONSES,
    summary="Connect to a thread",
)
async def connect_thread(thread_id: str, state: AppState, user: CurrentUser) -> Any:
    """Hydrate a thread: its stored history and state as snapshots, then any live run.

    The stream is one AG-UI run: ``RUN_STARTED``, ``MESSAGES_SNAPSHOT``,
    ``STATE_SNAPSHOT``, then the rest of the live run if there is one (its events
    keep their ``id``), else ``RUN_FINISHED``.
    """
    check_id("thread_id", thread_id, state.limits)
    live = _live_run(state, user, thread_id)
    chat = await state.store.get_chat_by_thread_id(user, thread_id)
    if chat is None and live is None:
        raise HTTPException(404, detail=f"thread {thread_id} not found")
    history = await _history(state, chat)
    frames: _RunFrames | None = None
    if live is not None:
        frames = await _connect_live(chat, history, live)
    elif chat is not None:
        frames = await _connect_elsewhere(state, chat, history)
    if frames is None:
        frames = await _connect_idle(thread_id, chat, history)
    return event_stream_response(frames, keepalive_interval=state.keepalive_interval)


async def _rejoin(state: ServerState, user: UUID, thread_id: str, run_id: str) -> _RunFrames | None:
    """The caller's run as ``/connect`` streams it, wherever it runs; ``None`` if not found."""
    handle = state.manager.get(thread_id, run_id, user_uuid=user)  # live or just finished
    chat = await state.store.get_chat_by_thread_id(user, thread_id)
    history = await _history(state, chat)
    if handle is not None:
        return await _connect_live(chat, history, handle)
    if chat is None:
        return None
    return await _join_relayed(state, chat, history, run_id)


async def _history(state: ServerState, chat: Chat | None) -> Sequence[Message]:
    """The chat's active branch: the store's kept history (read-only, extended by what
    changed since its last read), as a run reads it."""
    if chat is None:
        return []
    return await state.store.messages.read_history(chat.chat_uuid, TRANSLATION)


def _live_run(state: ServerState, user: UUID, thread_id: str) -> RunHandle[Any] | None:
    runs = [
        handle
        for handle in state.manager.live_runs()
        if handle.thread_id == thread_id and handle.user_uuid == user
    ]
    return runs[-1] if runs else None


async def _snapshot_frames(
    chat: Chat | None, history: Sequence[Message], replayed: Sequence[BaseEvent] = ()
) -> list[bytes]:
    """The thread's snapshot frames for a stream that then replays the ``replayed`` events.

    Messages those events touch are left out of the history, which the events rebuild,
    so none appears twice.
    """
    messages = await _translated(history)
    if replayed:
        exclude = {i for event in replayed for i in _message_ids(event)}
        messages = [m for m in messages if m.id not in exclude] + _opened_messages(replayed)
    state = chat.state if chat is not None and chat.state is not None else {}
    return [
        *await messages_snapshot_pieces(messages),
        encode_frame(StateSnapshotEvent(snapshot=state, timestamp=now_ms())),
    ]


async def _translated(history: Sequence[Message]) -> list[AGUIMessage]:
    """The AG-UI messages of ``history``: kept with the store's history when it is one."""
    if isinstance(history, HistoryView):
        return kept_translation(history)
    return await off_loop(history, translate_messages, history)


async def messages_snapshot_pieces(messages: Sequence[AGUIMessage]) -> list[bytes]:
    """``encode_frame(MessagesSnapshotEvent(messages=messages))`` in pieces that concatenate to it.

    A long chat's snapshot is megabytes of JSON; serialized in one call, or joined in
    one, it would hold the event loop for as long. So each message is serialized on its
    own, a step of them to a piece with a turn of the loop between pieces, and the frame
    goes out piece by piece (the stream's head yields them with no wait between, so no
    keep-alive comes inside the frame).
    """
    empty = event_json(MessagesSnapshotEvent(messages=[], timestamp=now_ms()))
    head = empty.removesuffix(_NO_MESSAGES_END)
    pieces = [f"data: {head}[".encode()]
    pieces += [piece async for piece in joined_in_steps(messages, _message_wire_json)]
    pieces.append(b"]}\n\n")
    return pieces


def _message_wire_json(message: AGUIMessage) -> bytes:
    return wire_json(message).encode()


_NO_MESSAGES_END = "[]}"
"""How a ``MESSAGES_SNAPSHOT`` with no messages ends: ``messages`` is its last field."""


async def _connect_idle(
    thread_id: str, chat: Chat | None, history: Sequence[Message]
) -> _RunFrames:
    run_id = f"connect-{uuid4().hex[:12]}"
    started, finished = run_started(thread_id, run_id), run_finished(thread_id, run_id)
    return _RunFrames(
        [encode_frame(started), *await _snapshot_frames(chat, history), encode_frame(finished)]
    )


def _message_ids(event: BaseEvent) -> list[str]:
    ids = [getattr(event, "message_id", None), getattr(event, "parent_message_id", None)]
    return [i for i in ids if isinstance(i, str)]


_MESSAGE: TypeAdapter[AGUIMessage] = TypeAdapter(AGUIMessage)


def _opened_messages(events: Sequence[BaseEvent]) -> list[AGUIMessage]:
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


async def _connect_live(
    chat: Chat | None, history: Sequence[Message], handle: RunHandle[Any]
) -> _RunFrames:
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
                await close_iterator(pairs)
    except EventsDroppedError:  # pragma: no cover - the server keeps whole logs
        head = []
    frames = await _hydration(chat, history, handle.run_id, head)
    return _RunFrames(frames, reopen=_local_reopen(handle), after=seen)


async def _connect_elsewhere(
    state: ServerState, chat: Chat, history: Sequence[Message]
) -> _RunFrames | None:
    """Frames joining the chat's run live in another process, if there is one."""
    if state.manager.relay is None:
        return None
    live = await state.manager.live_chat_runs(chat.chat_uuid)
    if not live:
        return None
    return await _join_relayed(state, chat, history, live[0])


async def _join_relayed(
    state: ServerState, chat: Chat, history: Sequence[Message], run_id: str
) -> _RunFrames | None:
    """Frames joining the chat's run ``run_id`` from its relayed events; ``None`` if none."""
    manager, relay = state.manager, state.manager.relay
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
    frames = await _hydration(chat, history, run_id, head)

    async def reopen(after: int) -> EventBatches | None:
        events = await manager.resume_chat_run(chat.chat_uuid, run_id, after)
        return None if events is None else _one_by_one(events)

    return _RunFrames(frames, stream=_one_by_one(rest), reopen=reopen, after=seen)


def _before_run(history: Sequence[Message], run_id: str) -> Sequence[Message]:
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


async def _hydration(
    chat: Chat | None,
    history: Sequence[Message],
    run_id: str,
    head: list[tuple[int, BaseEvent]],
) -> list[bytes]:
    """The run's ``RUN_STARTED``, the snapshots, then the rest of ``head`` (the run so far).

    ``head`` starts at the run's first event, so every message the run produced (all
    but its input) is left to its events. The history may hold records of events not in
    ``head`` (a relayed ``head`` lags the run's writer) and records no event names (the
    message the store opens for a tool call without a parent).
    """
    history = _before_run(history, run_id)
    frames: list[bytes] = []
    if head and head[0][1].type == EventType.RUN_STARTED:
        event_id, started = head.pop(0)
        frames.append(encode_frame(started, event_id))
    replayed = [event for _, event in head]
    frames.extend(await _snapshot_frames(chat, history, replayed))
    snapshot_seen = False
    for event_id, event in head:
        snapshot_seen = snapshot_seen or event.type == EventType.STATE_SNAPSHOT
        # Deltas from before the run's own snapshot are already folded into the
        # stored state just sent; replaying them would apply them twice.
        if event.type == EventType.STATE_DELTA and not snapshot_seen:
            continue
        frames.append(encode_frame(event, event_id))
    return frames
