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
every object it tracks. So what is kept long (a history the store keeps, what is
derived from it) is taken out of the collector's view once built (:func:`untrack`):
it is plain data, freed by reference counting like any other object, and a full
collection of the process no longer scans it. While such work runs, on a worker
thread or in one step on the loop, the collector is paused, so it never scans the
objects built before they are untracked (it resumes when the work returns; nothing
is frozen).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence, Sized
from contextlib import contextmanager
from typing import Any, TypeVar
from uuid import UUID

from pydantic import BaseModel

__all__ = [
    "OFF_LOOP_ITEMS",
    "STEP_ITEMS",
    "collector_paused",
    "consume",
    "dropped_in_steps",
    "in_steps",
    "joined_in_steps",
    "off_loop",
    "untrack",
]

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
    worker descheduled while it holds the interpreter stalls the loop with it). Each
    step runs with the collector paused (a step that keeps what it builds untracks it
    before it returns, so no collection ever scans it); between the steps it runs, as
    other tasks do, and must keep finalizing what they drop.
    """
    if len(items) < OFF_LOOP_ITEMS:
        with collector_paused():
            step(items)
        return
    for start in range(0, len(items), STEP_ITEMS):
        with collector_paused():
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
    joined text, and no step joins more than :data:`STEP_ITEMS` items (joining megabytes
    at once holds the loop too).
    """
    for start in range(0, len(items), STEP_ITEMS):
        with collector_paused():
            piece = separator.join([fn(item) for item in items[start : start + STEP_ITEMS]])
        yield piece if start == 0 else separator + piece
        await asyncio.sleep(0)


async def off_loop(items: Sized, fn: Callable[..., _T], *args: Any) -> _T:
    """Return ``fn(*args)``, run on a worker thread when ``items`` holds many items.

    ``fn`` must not touch state the event loop's tasks change meanwhile: it gets
    objects no other task holds yet (rows just read, a list about to be handed out).
    """
    if len(items) < OFF_LOOP_ITEMS:
        return _collector_paused(fn, *args)
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


_RECORDS = (BaseModel, UUID)


def untrack(*objects: object) -> None:
    """Take ``objects``, and the data they hold, out of the cyclic collector's view.

    For what is kept long and is plain data: a kept history's messages (with their
    tool calls and reasoning), the AG-UI messages translated from them, the containers
    of an index of them. A full collection scans every object the collector tracks,
    wherever it runs, so a long history kept tracked makes every full collection of the
    process cost as much as the history is long. An untracked object is still freed
    when its last reference goes (reference counting); what the collector no longer
    does for it is look for cycles through it. So only data that never refers back to
    itself is untracked: the dicts, lists, tuples, sets, models and UUIDs reached from
    ``objects`` (through dict values, list and tuple items, and models' fields; a set's
    items and anything else stay as they are), and the walk stops at what is untracked
    already (items appended to an untracked container later are untracked by whoever
    appends them). Unlike ``gc.freeze()``, nothing else in the process is touched.
    Without CPython's C API (``ctypes.pythonapi``) it does nothing.
    """
    untrack_at = _untrack_function()
    if untrack_at is None:
        return
    is_tracked, referents = gc.is_tracked, gc.get_referents
    stack = list(objects)
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        if not is_tracked(item):
            continue
        if type(item) is dict:
            extend(filter(is_tracked, item.values()))
        elif type(item) is list or type(item) is tuple:
            extend(filter(is_tracked, item))
        elif type(item) is not set and type(item) is not frozenset:
            if not isinstance(item, _RECORDS):
                continue
            # A model's own dict and sets, a UUID's enum member (which is left alone).
            extend(filter(is_tracked, referents(item)))
        untrack_at(id(item))


def untrack_flat(model: BaseModel) -> None:
    """:func:`untrack` for one model whose fields hold strings, numbers and enums alone.

    Only the model, its dict and its set of fields are untracked, without the walk: for
    what is untracked by the thousand as it arrives (the run log's text deltas).
    """
    untrack_at = _untrack_function()
    if untrack_at is not None:
        untrack_at(id(model))
        untrack_at(id(model.__dict__))
        untrack_at(id(model.__pydantic_fields_set__))


@functools.cache
def _untrack_function() -> Callable[[int], None] | None:
    """CPython's ``PyObject_GC_UnTrack`` (public C API), called with an object's address
    (its ``id()`` on CPython); loaded on first use."""
    try:
        import ctypes

        function = ctypes.pythonapi.PyObject_GC_UnTrack
    except (ImportError, AttributeError):
        return None
    function.argtypes = (ctypes.c_void_p,)
    function.restype = None
    return function
