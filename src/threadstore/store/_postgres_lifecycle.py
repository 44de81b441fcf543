"""The PostgreSQL backend's primitives of a conversation's life: summaries, erasure, retention.

SQL as module constants with placeholders only (those alike on both SQL backends in
``store/_sql_lifecycle.py``); each call borrows a connection of the store (or joins its
transaction), as the store's own statements do.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from threadstore.store._lifecycle import ERASED_KINDS, GLOBAL_SCOPE, SUMMARY_COLUMNS
from threadstore.store._postgres_connections import PostgresDriver
from threadstore.store._sql_lifecycle import LifecycleSQL, RetentionSQL, SQLLifecycle

if TYPE_CHECKING:
    from threadstore.store.postgres import PostgresStore

__all__ = ["PostgresLifecycle"]

# The chats of one erasure batch, locked: a concurrent write to them waits for the batch.
LOCK_BATCH = (
    "SELECT chat_uuid FROM chats WHERE user_uuid = $1 ORDER BY chat_uuid LIMIT $2 FOR UPDATE"
)
COUNT_ERASED = "SELECT " + ", ".join(
    f"(SELECT count(*) FROM {kind} WHERE chat_uuid = ANY($1))" for kind in ERASED_KINDS[1:]
)
ERASE_CHATS = "DELETE FROM chats WHERE chat_uuid = ANY($1)"
_RETENTION = RetentionSQL(
    lambda n: f"${n}",
    false="false",
    age=lambda column: f"extract(epoch FROM $1 - c.{column})",
)
_STILL_EXPIRED = _RETENTION.still_expired("= ANY($4)")
# The chats locked first: a run writing to one meanwhile waits, then finds it gone.
DELETE_EXPIRED = (
    f"WITH gone AS (SELECT chat_uuid FROM chats WHERE chat_uuid IN ({_STILL_EXPIRED}) FOR UPDATE),"
    " counted AS (SELECT count(*) AS n FROM messages WHERE chat_uuid IN (SELECT * FROM gone)),"
    " deleted AS (DELETE FROM chats WHERE chat_uuid IN (SELECT * FROM gone) RETURNING chat_uuid)"
    " SELECT (SELECT array_agg(chat_uuid) FROM deleted), (SELECT n FROM counted)"
)
PRUNE_RUN_LOGS = (
    "WITH ranked AS (SELECT r.chat_uuid, r.run_id, r.status,"
    " row_number() OVER (PARTITION BY r.chat_uuid ORDER BY r.created_at DESC) AS n,"
    " COALESCE(pc.keep_run_logs, pu.keep_run_logs, pg.keep_run_logs) AS keep,"
    f" {_RETENTION.held} AS held FROM runs r JOIN chats c ON c.chat_uuid = r.chat_uuid"
    + RetentionSQL.joins("$1")
    + "), gone AS (DELETE FROM run_events e USING ranked k WHERE e.chat_uuid = k.chat_uuid"
    " AND e.run_id = k.run_id AND k.keep IS NOT NULL AND NOT k.held AND k.n > k.keep"
    " AND k.status <> 'running' RETURNING 1) SELECT count(*) FROM gone"
)


class _Statements(LifecycleSQL):
    select_summaries = (
        "SELECT " + ", ".join("s." + c for c in SUMMARY_COLUMNS[:-2]) + ", s.metadata::text,"
        " s.created_at FROM summaries s"
        " JOIN chats c ON c.chat_uuid = s.chat_uuid AND c.deleted_at IS NULL"
        " WHERE s.chat_uuid = $1 ORDER BY s.created_at DESC, s.summary_uuid DESC"
    )
    select_receipts = (
        "SELECT receipt_uuid, user_uuid, requested_by, started_at, finished_at, counts::text"
        " FROM erasure_receipts WHERE $1::uuid IS NULL OR user_uuid = $1"
        " ORDER BY started_at DESC, receipt_uuid DESC"
    )
    select_expired = (
        f"SELECT * FROM (SELECT c.chat_uuid, c.user_uuid, {_RETENTION.reason} AS reason"
        f" FROM chats c{_RETENTION.policies} WHERE ($4::uuid IS NULL OR c.chat_uuid > $4)"
        f" AND NOT {_RETENTION.held}) e"
        " WHERE reason IS NOT NULL ORDER BY chat_uuid LIMIT $5"
    )


class PostgresLifecycle(PostgresDriver, SQLLifecycle):
    """Summaries, erasure and retention of a :class:`~threadstore.store.postgres.PostgresStore`."""

    sql = _Statements(lambda n: f"${n}", lambda n: f"${n}::jsonb")

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def erase_chats(self, user_uuid: UUID, limit: int) -> tuple[dict[str, int], list[UUID]]:
        store = self.store
        async with store.transaction(), store._connection() as conn:
            chats = [row[0] for row in await store._fetch_on(conn, LOCK_BATCH, user_uuid, limit)]
            if not chats:
                return dict.fromkeys(ERASED_KINDS, 0), []
            (counts,) = await store._fetch_on(conn, COUNT_ERASED, chats)
            await store._fetch_on(conn, ERASE_CHATS, chats)
        return {"chats": len(chats), **dict(zip(ERASED_KINDS[1:], counts, strict=True))}, chats

    async def delete_expired(
        self, chats: Sequence[UUID], now: datetime, window: float
    ) -> tuple[list[UUID], int]:
        rows = await self.store._fetch(DELETE_EXPIRED, now, window, GLOBAL_SCOPE, list(chats))
        deleted, messages = rows[0]
        return list(deleted or []), int(messages or 0)

    async def prune_run_logs(self) -> int:
        rows = await self.store._fetch(PRUNE_RUN_LOGS, GLOBAL_SCOPE)
        return int(rows[0][0])
