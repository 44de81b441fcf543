"""Helpers for tests of the SQLite backend on real files."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from threadstore import open_store
from threadstore.store.sqlite import SQLiteStore


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
    before = store.thread.calls + store.reader.calls
    try:
        yield hops
    finally:
        hops[0] = store.thread.calls + store.reader.calls - before
