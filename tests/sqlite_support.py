"""Helpers for tests of the SQLite backend on real files."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

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
    """Count the calls the store makes to its aiosqlite thread inside the block."""
    hops = [0]
    connection = store.connection
    send = connection._execute

    async def counted(*args: Any, **kwargs: Any) -> Any:
        hops[0] += 1
        return await send(*args, **kwargs)

    connection._execute = counted  # type: ignore[method-assign]
    try:
        yield hops
    finally:
        del connection._execute  # back to the class's method
