"""Work on a whole history, run off the event loop (or in steps) once the history is long.

Building thousands of models, copying a cached history or translating it holds the
thread that runs it for milliseconds per thousand messages. On the event loop that
freezes every other task of the process (in the server: every other live stream)
for as long, so beyond :data:`OFF_LOOP_ITEMS` items the work runs on a worker
thread, and the loop thread gets the interpreter back at every switch interval
(``sys.getswitchinterval()``, 5 ms by default) instead of waiting for the end.
Below it the hop to a thread would cost more than the work.

A worker thread does not help against the cyclic garbage collector: a collection
holds the interpreter, whatever thread triggers it, for as long as it takes to scan
every tracked object, and building a long history's objects triggers several that
scan all of them. So while such work runs on a worker thread the collector is paused
(it resumes when the work returns; nothing is frozen).
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable, Iterator, Sequence, Sized
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["OFF_LOOP_ITEMS", "STEP_ITEMS", "collector_paused", "consume", "in_steps", "off_loop"]

_T = TypeVar("_T")
_I = TypeVar("_I")

OFF_LOOP_ITEMS = 500
"""Items (rows, messages) from which work on them runs on a worker thread, or in steps."""

STEP_ITEMS = 100
"""Items one step of :func:`in_steps` handles before yielding to the loop."""

_pause = threading.Lock()
_paused = 0
_was_enabled = False


async def in_steps(items: Sequence[_I], step: Callable[[Sequence[_I]], object]) -> None:
    """Call ``step`` on consecutive slices of ``items``, yielding to the loop between them.

    For work that can be fed in pieces (an index, a translation): on the loop thread,
    :data:`STEP_ITEMS` items at a time, so no step holds the loop for long and no
    worker thread competes with the loop for the interpreter (on a loaded machine a
    worker descheduled while it holds the interpreter stalls the loop with it). The
    collector is not paused across the steps: other tasks run between them, and it
    must keep finalizing what they drop.
    """
    if len(items) < OFF_LOOP_ITEMS:
        step(items)
        return
    for start in range(0, len(items), STEP_ITEMS):
        step(items[start : start + STEP_ITEMS])
        await asyncio.sleep(0)


async def off_loop(items: Sized, fn: Callable[..., _T], *args: Any) -> _T:
    """Return ``fn(*args)``, run on a worker thread when ``items`` holds many items.

    ``fn`` must not touch state the event loop's tasks change meanwhile: it gets
    objects no other task holds yet (rows just read, a list about to be handed out).
    """
    if len(items) < OFF_LOOP_ITEMS:
        return fn(*args)
    return await asyncio.to_thread(_collector_paused, fn, *args)


def _collector_paused(fn: Callable[..., _T], *args: Any) -> _T:
    with collector_paused():
        return fn(*args)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector inside the block (of any thread), for synchronous work.

    Not across awaits, and nothing is frozen (``gc.freeze()``): objects alive at a
    freeze, dropped later in a cycle, would never be collected, and an asyncio server
    relies on the collector to finalize dropped streams and tasks.
    """
    global _paused, _was_enabled
    with _pause:
        if _paused == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _paused += 1
    try:
        yield
    finally:
        with _pause:
            _paused -= 1
            if _paused == 0 and _was_enabled:
                gc.enable()


def consume(fn: Callable[[list[Any]], _T], items: list[Any]) -> _T:
    """Return ``fn(items)`` and empty ``items``: under :func:`off_loop`, the thread that
    built models from a long list of rows also frees the rows, not the event loop."""
    try:
        return fn(items)
    finally:
        items.clear()
