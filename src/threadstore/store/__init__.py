"""Storage backends behind one contract, opened from a URL.

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
from threadstore.store.base import (
    Capabilities,
    ChatRepositoryLike,
    MessageRepositoryLike,
    RunRepositoryLike,
    Siblings,
    Store,
    TreeNode,
)
from threadstore.store.ops import (
    CreateMessage,
    CreateReasoning,
    CreateToolCall,
    FinalizeRunRecords,
    FinishRun,
    RenameChat,
    UpdateChatState,
    UpdateMessage,
    UpdateReasoning,
    UpdateToolCall,
    Write,
)

__all__ = [
    "Capabilities",
    "ChatRepositoryLike",
    "CreateMessage",
    "CreateReasoning",
    "CreateToolCall",
    "FinalizeRunRecords",
    "FinishRun",
    "MessageRepositoryLike",
    "RenameChat",
    "RunRepositoryLike",
    "Siblings",
    "Store",
    "TreeNode",
    "UpdateChatState",
    "UpdateMessage",
    "UpdateReasoning",
    "UpdateToolCall",
    "Write",
    "create_store",
    "open_store",
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
        from threadstore.store.postgres import PostgresStore

        store: Store = PostgresStore(url, **options)
        return store
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
