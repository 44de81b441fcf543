"""Helpers for tests of the SQLite backend on real files."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from threadstore import open_store
from threadstore.store.sqlite import SQLiteStore

LOOP_TURNS = 10_000
"""Turns of the event loop :func:`until` waits before it fails (not a clock: a count)."""


async def until(condition: Callable[[], bool], what: str) -> None:
    """Let other tasks run until ``condition()`` holds; fail, naming ``what``, if it never does.

    For states that the loop's own tasks reach (a queue filling, a lock taken): a test
    waiting on one that never comes fails after :data:`LOOP_TURNS` turns instead of
    spinning for ever.
    """
    for _ in range(LOOP_TURNS):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{what}: not after {LOOP_TURNS} turns of the event loop")


@asynccontextmanager
async def sqlite_store(path: Path, query: str = "") -> AsyncIterator[SQLiteStore]:
    """An open, migrated SQLite store on ``path`` (``query``: URL options, e.g. ``?inline=off``)."""
    store = await open_store(f"sqlite:///{path}{query}")
    assert isinstance(store, SQLiteStore)
    try:
        yield store
    finally:
        await store.close()


@contextmanager
def counting_hops(store: SQLiteStore) -> Iterator[list[int]]:
    """Count the calls the store makes to its database threads (writer and reader) in the block."""
    hops = [0]
    before = store.executor.thread.calls + store.executor.reader.calls
    try:
        yield hops
    finally:
        hops[0] = store.executor.thread.calls + store.executor.reader.calls - before
