"""Server-sent events: frame encoding, keep-alive comments and the streaming response.

Each AG-UI event is one frame, ``id: <n>\\ndata: <json>\\n\\n``, where ``n`` is the
event's number in its run; a client that reconnects sends it back as
``Last-Event-ID`` and gets the rest of the run. While the run is quiet the stream
carries ``: keep-alive`` comments so proxies do not close it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from ag_ui.core import BaseEvent
from fastapi.responses import StreamingResponse

from threadstore.agui import event_json
from threadstore.errors import InvalidInputError

__all__ = [
    "DEFAULT_KEEPALIVE_INTERVAL",
    "SSE_HEADERS",
    "FrameSource",
    "close_iterator",
    "encode_event",
    "encode_frame",
    "event_stream_response",
    "with_keepalive",
]

DEFAULT_KEEPALIVE_INTERVAL = 15.0
"""Seconds of silence after which a ``: keep-alive`` comment is sent."""

KEEPALIVE_FRAME = b": keep-alive\n\n"

SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
"""Headers of every event stream: no caching, no proxy buffering."""

FrameSource = Callable[[], AsyncIterator[bytes]]
"""Opens a stream's frames; each call continues after the last frame an earlier call yielded.

:func:`with_keepalive` interrupts a quiet stream by cancelling its iterator's wait, and
calls the source again for the rest of the stream after the keep-alive comment.
"""


encode_event = event_json
"""Return the event's wire JSON (camelCase keys, unset optional fields left out, one line)."""


def encode_frame(event: BaseEvent, event_id: int | None = None, text: str | None = None) -> bytes:
    """Return one SSE frame for ``event``, with an ``id:`` line when ``event_id`` is given.

    ``text``: the event's JSON when the caller has it already (see ``RunHandle.json_of``).
    """
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}data: {event_json(event) if text is None else text}\n\n".encode()


class _IdleWatch:
    """One timer per stream that interrupts the stream's wait once it has been quiet.

    Frames only move ``last``; the timer re-arms itself from it when it fires, so a
    flowing stream schedules no timer per frame. The interruption is a cancellation of
    the reading task, told apart from any other one as ``asyncio.timeout`` does.
    """

    __slots__ = (
        "_baseline",
        "_interrupting",
        "_loop",
        "_task",
        "_timer",
        "interval",
        "last",
        "waiting",
    )

    def __init__(self, interval: float) -> None:
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - async generators always run in a task
            raise RuntimeError("an event stream must be read from a task")
        self._loop = asyncio.get_running_loop()
        self._task = task
        self._baseline = task.cancelling()
        self._interrupting = False
        self.interval = interval
        self.last = self._loop.time()
        """Loop time of the stream's last frame."""
        self.waiting = False
        """True while the reading task waits for the source's next frame."""
        self._timer = self._loop.call_at(self.last + interval, self._check)

    def _check(self) -> None:
        now = self._loop.time()
        due = self.last + self.interval
        if now >= due:
            # A cancellation already under way (a client disconnect) is left alone: an
            # interruption now could not be told apart from it.
            if (
                self.waiting
                and not self._interrupting
                and self._task.cancelling() == self._baseline
            ):
                self._interrupting = True
                self._task.cancel()
            due = now + self.interval
        self._timer = self._loop.call_at(due, self._check)

    def interrupted(self) -> bool:
        """Whether the cancellation being handled is this watch's alone (it is then undone)."""
        if not self._interrupting:
            return False
        self._interrupting = False
        return self._task.uncancel() <= self._baseline

    def close(self) -> None:
        """Stop the timer."""
        self._timer.cancel()


def with_keepalive(source: FrameSource, interval: float) -> AsyncIterator[bytes]:
    """Yield ``source()``'s frames, with a keep-alive comment after each ``interval`` of silence.

    The frames are read in the consumer's own task, so a flowing stream costs no task,
    queue or timer per frame. When the stream has been quiet for ``interval`` while
    waiting for a frame, that wait is cancelled, the comment goes out, and ``source()``
    is called again for the rest; its iterators must let that cancellation propagate.
    Read the result from one task.
    """
    if not interval > 0:
        raise InvalidInputError(f"the keep-alive interval must be > 0, got {interval}")
    return _keepalive(source, interval)


async def _keepalive(source: FrameSource, interval: float) -> AsyncIterator[bytes]:
    watch = _IdleWatch(interval)
    time = asyncio.get_running_loop().time
    frames = source()
    try:
        while True:
            watch.waiting = True
            try:
                frame = await anext(frames)
            except StopAsyncIteration:
                return
            except asyncio.CancelledError:
                watch.waiting = False
                if not watch.interrupted():
                    raise
                await close_iterator(frames)  # it ended with the cancellation
                frame = KEEPALIVE_FRAME
                frames = source()
            else:
                watch.waiting = False
            watch.last = time()
            yield frame
    finally:
        watch.close()
        await close_iterator(frames)


async def close_iterator(iterator: AsyncIterator[Any]) -> None:
    """Close an async iterator that has ``aclose`` (async generators); a no-op otherwise."""
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


def event_stream_response(source: FrameSource, *, keepalive_interval: float) -> StreamingResponse:
    """Stream ``source``'s frames as ``text/event-stream`` with keep-alives and no caching."""
    return StreamingResponse(
        with_keepalive(source, keepalive_interval),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )
