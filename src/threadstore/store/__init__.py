"""Storage backends behind one contract, opened from a URL.

The writes ``Store.apply_writes`` takes are in :mod:`threadstore.store.ops`.

====================================  ===========================================
URL                                   backend
====================================  ===========================================
``memory://``                         :class:`~threadstore.store.memory.MemoryStore`
``sqlite:///relative/path.db``        :class:`~threadstore.store.sqlite.SQLiteStore`
``sqlite:////absolute/path.db``       (same; ``sqlite://:memory:`` for a private DB)
``postgresql://user@host:port/db``    :class:`~threadstore.store.postgres.PostgresStore`
====================================  ===========================================
"""

from __future__ import annotations

from typing import Any

from threadstore.errors import ConfigurationError
from threadstore.store._base import Store
from threadstore.store._contract import (
    Capabilities,
    ChatRepositoryLike,
    MessageRepositoryLike,
    RunRepositoryLike,
    capabilities_of,
)
from threadstore.store._copies import (
    chat_create,
    message_create,
    reasoning_create,
    tool_call_create,
)
from threadstore.store._groups import SWEEP_BATCH
from threadstore.store._history import Derivation, HistoryView
from threadstore.store._queries import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, Siblings, TreeNode
from threadstore.store._run_events import EventBatch, RunEventListener, RunEventLog
from threadstore.store._run_storage import RunStorage, run_storage
from threadstore.store.ops import Write

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "SWEEP_BATCH",
    "Capabilities",
    "ChatRepositoryLike",
    "Derivation",
    "EventBatch",
    "HistoryView",
    "MessageRepositoryLike",
    "RunEventListener",
    "RunEventLog",
    "RunRepositoryLike",
    "RunStorage",
    "Siblings",
    "Store",
    "TreeNode",
    "Write",
    "capabilities_of",
    "chat_create",
    "create_store",
    "message_create",
    "open_store",
    "reasoning_create",
    "run_storage",
    "tool_call_create",
]


def create_store(url: str, **options: Any) -> Store:
    """Build (but do not connect) the backend named by ``url``; see the module table."""
    scheme = url.split(":", 1)[0].lower()
    if scheme == "memory":
        from threadstore.store.memory import MemoryStore

        return MemoryStore(url, **options)
    if scheme == "sqlite":
        from threadstore.store.sqlite import SQLiteStore

        return SQLiteStore(url, **options)
    if scheme in ("postgres", "postgresql"):
        try:
            from threadstore.store.postgres import PostgresStore
        except ModuleNotFoundError as error:
            # The driver is an extra: a bare install runs SQLite and memory stores only.
            if error.name != "asyncpg":
                raise
            raise ConfigurationError(
                'the PostgreSQL store needs asyncpg: pip install "threadstore[postgres]"'
            ) from None

        return PostgresStore(url, **options)
    raise ConfigurationError(
        f"unsupported store URL {url!r}: use memory://, sqlite:///path.db or postgresql://..."
    )


async def open_store(url: str, *, setup: bool = True, **options: Any) -> Store:
    """Open the backend named by ``url``; with ``setup`` (the default) apply pending migrations.

    Use as ``async with await open_store(url) as store:`` or close it yourself.
    """
    store = create_store(url, **options)
    try:
        await store.connect()
        if setup:
            await store.setup()
    except BaseException:
        await store.close()
        raise
    return store
