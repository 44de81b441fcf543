"""The SQLite backend's primitives of a conversation's life: summaries, erasure, retention.

SQL as module constants with placeholders only (those alike on both SQL backends in
``store/_sql_lifecycle.py``); statements run through the store's executor like every
other write (one transaction per call, on the database thread), reads on the reader
connection.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from threadstore.store._lifecycle import GLOBAL_SCOPE, SUMMARY_COLUMNS
from threadstore.store._sql_lifecycle import LifecycleSQL, RetentionSQL, SQLLifecycle
from threadstore.store._sqlite_executor import SQLiteDriver
from threadstore.store._sqlite_sql import ts
from threadstore.store._sqlite_writes import Statement

if TYPE_CHECKING:
    from threadstore.store.sqlite import SQLiteStore

__all__ = ["SQLiteLifecycle"]

# The same chats for every statement of one erasure batch: its transaction holds the
# writer, and the order is fixed.
_BATCH = "SELECT chat_uuid FROM chats WHERE user_uuid = ?1 ORDER BY chat_uuid LIMIT ?2"
COUNT_ERASED = {
    kind: f"SELECT count(*) FROM {kind} WHERE chat_uuid IN ({_BATCH})"
    for kind in ("messages", "tool_calls", "reasonings", "runs", "summaries")
}
ERASE_CHATS = f"DELETE FROM chats WHERE chat_uuid IN ({_BATCH}) RETURNING chat_uuid"
_RETENTION = RetentionSQL(
    lambda n: f"?{n}",
    false="0",
    age=lambda column: f"(julianday(?1) - julianday(c.{column})) * 86400.0",
)
_STILL_EXPIRED = _RETENTION.still_expired("IN (SELECT value FROM json_each(?4))")
COUNT_EXPIRED_MESSAGES = f"SELECT count(*) FROM messages WHERE chat_uuid IN ({_STILL_EXPIRED})"
DELETE_EXPIRED = f"DELETE FROM chats WHERE chat_uuid IN ({_STILL_EXPIRED}) RETURNING chat_uuid"


class _Statements(LifecycleSQL):
    select_summaries = (
        "SELECT " + ", ".join("s." + c for c in SUMMARY_COLUMNS) + " FROM summaries s"
        " JOIN chats c ON c.chat_uuid = s.chat_uuid AND c.deleted_at IS NULL"
        " WHERE s.chat_uuid = ? ORDER BY s.created_at DESC, s.rowid DESC"
    )
    select_receipts = (
        "SELECT receipt_uuid, user_uuid, requested_by, started_at, finished_at, counts"
        " FROM erasure_receipts WHERE ?1 IS NULL OR user_uuid = ?1"
        " ORDER BY started_at DESC, rowid DESC"
    )
    # Walks the chats by primary key, so a page stops once it has ``limit`` (?5) of them;
    # every chat uuid sorts after "".
    select_expired = (
        f"SELECT c.chat_uuid, c.user_uuid, {_RETENTION.reason} AS reason"
        f" FROM chats c{_RETENTION.policies}"
        f" WHERE c.chat_uuid > ?4 AND NOT {_RETENTION.held} AND reason IS NOT NULL"
        " ORDER BY c.chat_uuid LIMIT ?5"
    )
    before_every_chat = ""


class SQLiteLifecycle(SQLiteDriver, SQLLifecycle):
    """Summaries, erasure and retention of one :class:`~threadstore.store.sqlite.SQLiteStore`."""

    sql = _Statements(lambda n: f"?{n}", lambda n: f"?{n}")

    def __init__(self, store: SQLiteStore) -> None:
        self.executor = store.executor

    async def erase_chats(self, user_uuid: UUID, limit: int) -> tuple[dict[str, int], list[UUID]]:
        params = (str(user_uuid), limit)
        # Cascades to many rows: never inline on the event loop's thread.
        counts = [Statement(sql, params, inline=False) for sql in COUNT_ERASED.values()]
        results = await self.executor.run(*counts, Statement(ERASE_CHATS, params, inline=False))
        erased = [UUID(row[0]) for row in results[-1]]
        found = {kind: rows[0][0] for kind, rows in zip(COUNT_ERASED, results, strict=False)}
        return {"chats": len(erased), **found, "run_events": 0}, erased

    async def delete_expired(
        self, chats: Sequence[UUID], now: datetime, window: float
    ) -> tuple[list[UUID], int]:
        params = (ts(now), window, str(GLOBAL_SCOPE), json.dumps([str(c) for c in chats]))
        # Each chat is checked again as it goes: one written to since it was found stays.
        counted, deleted = await self.executor.run(
            Statement(COUNT_EXPIRED_MESSAGES, params, inline=False),
            Statement(DELETE_EXPIRED, params, inline=False),
        )
        return [UUID(row[0]) for row in deleted], counted[0][0]
