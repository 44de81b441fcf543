"""Work on a whole history, run off the event loop (or in steps) once the history is long.

Building thousands of models or serializing them holds the thread that runs it for
milliseconds per thousand messages. On the event loop that freezes every other task of
the process (in the server: every other live stream) for as long, so beyond
:data:`OFF_LOOP_ITEMS` items the work runs on a worker thread, and the loop thread gets
the interpreter back at every switch interval (``sys.getswitchinterval()``, 5 ms by
default) instead of waiting for the end; or, for work that can be fed in pieces, in
steps on the loop. Below it the hop to a thread would cost more than the work.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence, Sized
from typing import Any, TypeVar

__all__ = [
    "OFF_LOOP_ITEMS",
    "STEP_ITEMS",
    "consume",
    "dropped_in_steps",
    "in_steps",
    "joined_in_steps",
    "off_loop",
]

_T = TypeVar("_T")
_I = TypeVar("_I")

OFF_LOOP_ITEMS = 500
"""Items (rows, messages) from which work on them runs on a worker thread, or in steps."""

STEP_ITEMS = 100
"""Items one step of :func:`in_steps` handles before yielding to the loop."""


async def in_steps(items: Sequence[_I], step: Callable[[Sequence[_I]], object]) -> None:
    """Call ``step`` on consecutive slices of ``items``, yielding to the loop between them.

    For work that can be fed in pieces (an index, a translation): on the loop thread,
    :data:`STEP_ITEMS` items at a time, so no step holds the loop for long and no
    worker thread competes with the loop for the interpreter.
    """
    if len(items) < OFF_LOOP_ITEMS:
        step(items)
        return
    for start in range(0, len(items), STEP_ITEMS):
        step(items[start : start + STEP_ITEMS])
        await asyncio.sleep(0)


async def dropped_in_steps(items: list[Any]) -> None:
    """Empty ``items`` a step of :data:`STEP_ITEMS` at a time, yielding to the loop between.

    For a long list of objects nothing else holds, once the caller is done with it: when
    the last reference goes, freeing tens of thousands of models at once holds the loop
    for as long as building them would.
    """
    while len(items) > STEP_ITEMS:
        del items[-STEP_ITEMS:]
        await asyncio.sleep(0)
    items.clear()


async def joined_in_steps(
    items: Sequence[_I], fn: Callable[[_I], bytes], separator: bytes = b","
) -> AsyncIterator[bytes]:
    """``separator.join(map(fn, items))`` in pieces, one per :func:`in_steps` step.

    For a long list's serialization sent as it is made: concatenated, the pieces are the
    joined text, and no step joins more than :data:`STEP_ITEMS` items.
    """
    for start in range(0, len(items), STEP_ITEMS):
        piece = separator.join([fn(item) for item in items[start : start + STEP_ITEMS]])
        yield piece if start == 0 else separator + piece
        await asyncio.sleep(0)


async def off_loop(items: Sized, fn: Callable[..., _T], *args: Any) -> _T:
    """Return ``fn(*args)``, run on a worker thread when ``items`` holds many items.

    ``fn`` must not touch state the event loop's tasks change meanwhile: it gets
    objects no other task holds yet (rows just read, a list about to be handed out).
    """
    if len(items) < OFF_LOOP_ITEMS:
        return fn(*args)
    return await asyncio.to_thread(fn, *args)


def consume(fn: Callable[[list[Any]], _T], items: list[Any]) -> _T:
    """Return ``fn(items)`` and empty ``items``: under :func:`off_loop`, the thread that
    built models from a long list of rows also frees the rows, not the event loop."""
    try:
        return fn(items)
    finally:
        items.clear()
