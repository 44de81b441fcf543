"""The AG-UI endpoints: run, resume, cancel and connect.

``POST /agui`` takes a ``RunAgentInput`` and answers with the run's event stream.
Runs belong to the run manager, not to the request: a client that disconnects does
not stop the run or its persistence, and can pick the stream up again with
``GET .../events`` and ``Last-Event-ID``.

What a connecting or rejoining client is sent, and where its run is found (here or, on
PostgreSQL, in another server process), is the thread connector's to decide
(``threadstore.agui.connect``); these routes check ids, encode and stream.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from typing import Annotated, Any

from ag_ui.core import BaseEvent, MessagesSnapshotEvent, RunAgentInput
from ag_ui.core import Message as AGUIMessage
from fastapi import APIRouter, Header, HTTPException, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from threadstore import _telemetry
from threadstore._steps import joined_in_steps
from threadstore.agui import event_json, wire_json
from threadstore.agui.connect import Connection, Hydration, RunEvents, ThreadConnector
from threadstore.codec import now_ms
from threadstore.errors import InvalidInputError
from threadstore.models import Run, RunStatus, utcnow
from threadstore.server._deps import AppState, CurrentUser, ServerState
from threadstore.server._errors import error_response
from threadstore.server._limits import MAX_CURSOR, check_id, check_run_input
from threadstore.server._run_gate import RunConflictError
from threadstore.server._sse import close_iterator, encode_frame, event_stream_response

__all__ = ["CancelResult", "router"]

router = APIRouter(prefix="/agui", tags=["AG-UI"])

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
    """A stream's frames: ``head``, then those of the run's ``events`` after their ``after``.

    Each call resumes after the last frame yielded, as the keep-alives need: the
    first call reads the open stream and later ones what ``reopen`` gives.
    """

    def __init__(
        self,
        head: Sequence[bytes] = (),
        events: RunEvents | None = None,
        *,
        json_of: Callable[[int, BaseEvent], str] | None = None,
    ) -> None:
        self._head = deque(head)
        events = events or RunEvents()
        self._stream = events.stream
        self._reopen = events.reopen
        self._sent = events.after
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


async def _connection_frames(connection: Connection) -> _RunFrames:
    """The frames of ``connection``: its hydration encoded, then its run's events."""
    return _RunFrames(await _hydration_frames(connection.hydration), connection.events)


async def _hydration_frames(hydration: Hydration) -> list[bytes]:
    """``hydration``'s events as SSE frames, the ``MESSAGES_SNAPSHOT`` in pieces."""
    return [
        *(encode_frame(event, event_id) for event_id, event in hydration.lead),
        *await messages_snapshot_pieces(hydration.messages),
        encode_frame(hydration.state),
        *(encode_frame(event, event_id) for event_id, event in hydration.rest),
    ]


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
    return _stream(state, _RunFrames(events=RunEvents.local(handle), json_of=handle.json_of))


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
    connector = ThreadConnector(state.manager, state.store)
    with _telemetry.span("threadstore.resume", **{"threadstore.run_id": run_id}):
        frames: _RunFrames | None
        if snapshots:
            if after is not None:
                raise InvalidInputError(
                    "pass either after or snapshots=true: a stream with snapshots starts the "
                    "run over"
                )
            rejoined = await connector.rejoin(user, thread_id, run_id)
            frames = None if rejoined is None else await _connection_frames(rejoined)
        else:
            point = _resume_point(after, last_event_id)
            handle = state.manager.get(thread_id, run_id, user_uuid=user)
            if handle is not None and handle.done and point == handle.last_event_id:
                # An empty stream would only make the client reconnect, for ever.
                return Response(status_code=204)
            events = await connector.follow(user, thread_id, run_id, point)
            frames = None if events is None else _RunFrames(events=events)
        if frames is None:
            settled = await connector.settled(user, thread_id, run_id)
            frames = None if settled is None else await _connection_frames(settled)
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
    connection = await ThreadConnector(state.manager, state.store).connect(user, thread_id)
    if connection is None:
        raise HTTPException(404, detail=f"thread {thread_id} not found")
    return _stream(state, await _connection_frames(connection))


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
    pieces += [piece async for piece in joined_in_steps(messages, lambda m: wire_json(m).encode())]
    pieces.append(b"]}\n\n")
    return pieces


_NO_MESSAGES_END = "[]}"
"""How a ``MESSAGES_SNAPSHOT`` with no messages ends: ``messages`` is its last field."""
