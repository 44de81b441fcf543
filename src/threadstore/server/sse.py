"""Server-sent events: frame encoding, keep-alive comments and the streaming response.

Each AG-UI event is one frame, ``id: <n>\\ndata: <json>\\n\\n``, where ``n`` is the
event's number in its run; a client that reconnects sends it back as
``Last-Event-ID`` and gets the rest of the run. While the run is quiet the stream
carries ``: keep-alive`` comments so proxies do not close it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from ag_ui.core import BaseEvent
from fastapi.responses import StreamingResponse

__all__ = [
    "DEFAULT_KEEPALIVE_INTERVAL",
    "SSE_HEADERS",
    "close_iterator",
    "encode_event",
    "encode_frame",
    "event_stream_response",
    "with_keepalive",
]

DEFAULT_KEEPALIVE_INTERVAL = 15.0
"""Seconds of silence after which a ``: keep-alive`` comment is sent."""

KEEPALIVE_FRAME = b": keep-alive\n\n"
_MAX_PENDING_FRAMES = 256  # back-pressure: the log holds the events, not this queue

SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
"""Headers of every event stream: no caching, no proxy buffering."""


# JSON leaves these unescaped, but many line readers (Python's str.splitlines among
# them) treat them as line breaks and would cut a frame in two.
_LINE_BREAKERS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def encode_event(event: BaseEvent) -> str:
    """Return the event's wire JSON (camelCase keys, unset optional fields left out)."""
    text = event.model_dump_json(by_alias=True)
    return text if text.isascii() else text.translate(_LINE_BREAKERS)


def encode_frame(event: BaseEvent, event_id: int | None = None) -> bytes:
    """Return one SSE frame for ``event``, with an ``id:`` line when ``event_id`` is given."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}data: {encode_event(event)}\n\n".encode()


async def with_keepalive(frames: AsyncIterator[bytes], interval: float) -> AsyncIterator[bytes]:
    """Yield ``frames``, inserting a keep-alive comment after each ``interval`` of silence.

    A pump task moves frames into a small queue, so the wait for the next one can time
    out without interrupting the source; frames already waiting go out as one chunk.
    """
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(_MAX_PENDING_FRAMES)
    failure: Exception | None = None

    async def pump() -> None:
        nonlocal failure
        try:
            async for frame in frames:
                await queue.put(frame)
        except Exception as exc:  # re-raised by the reader, in the response's task
            failure = exc
        await queue.put(None)

    task = asyncio.create_task(pump(), name="threadstore-sse-pump")
    try:
        while True:
            if queue.empty():
                try:
                    async with asyncio.timeout(interval):
                        item = await queue.get()
                except TimeoutError:
                    yield KEEPALIVE_FRAME
                    continue
            else:
                item = queue.get_nowait()
            batch: list[bytes] = []
            while item is not None:
                batch.append(item)
                if queue.empty():
                    break
                item = queue.get_nowait()
            if batch:
                yield b"".join(batch)
            if item is None:
                if failure is not None:
                    raise failure
                return
    finally:
        task.cancel()
        await asyncio.wait({task})
        await close_iterator(frames)


async def close_iterator(iterator: AsyncIterator[Any]) -> None:
    """Close an async iterator that has ``aclose`` (async generators); a no-op otherwise."""
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


def event_stream_response(
    frames: AsyncIterator[bytes], *, keepalive_interval: float
) -> StreamingResponse:
    """Wrap ``frames`` in a ``text/event-stream`` response with keep-alives and no caching."""
    return StreamingResponse(
        with_keepalive(frames, keepalive_interval),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )
