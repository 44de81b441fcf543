"""The PostgreSQL backend's primitives of a conversation's life: summaries, erasure, retention.

SQL as module constants with placeholders only; each call borrows a connection of the
store (or joins its transaction), as the store's own statements do.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from threadstore import binary_json
from threadstore.errors import NotFoundError
from threadstore.models import FORMAT_VERSION, ErasureReceipt, Summary
from threadstore.store._lifecycle import LifecycleBackend

if TYPE_CHECKING:
    from threadstore.store.postgres import PostgresStore

__all__ = ["PostgresLifecycle"]

_SUMMARY_COLUMNS = (
    "summary_uuid",
    "chat_uuid",
    "first_message_uuid",
    "last_message_uuid",
    "last_seq",
    "message_count",
    "content",
    "summarizer",
    "metadata",
    "created_at",
)

# Only onto a live chat: a summary of a deleted chat would outlive it.
INSERT_SUMMARY = (
    "INSERT INTO summaries (" + ", ".join(_SUMMARY_COLUMNS) + ", format_version)"
    " SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $11"
    " WHERE EXISTS (SELECT 1 FROM chats WHERE chat_uuid = $2 AND deleted_at IS NULL)"
    " RETURNING 1"
)
SELECT_SUMMARIES = (
    "SELECT " + ", ".join("s." + c for c in _SUMMARY_COLUMNS[:-2]) + ", s.metadata::text,"
    " s.created_at FROM summaries s"
    " JOIN chats c ON c.chat_uuid = s.chat_uuid AND c.deleted_at IS NULL"
    " WHERE s.chat_uuid = $1 ORDER BY s.created_at DESC, s.summary_uuid DESC"
)
DELETE_SUMMARY = "DELETE FROM summaries WHERE chat_uuid = $1 AND summary_uuid = $2 RETURNING 1"

TOMBSTONE = "INSERT INTO erased_users (user_uuid, erased_at) VALUES ($1, $2) ON CONFLICT DO NOTHING"
# The chats of one erasure batch, locked: a concurrent write to them waits for the batch.
LOCK_BATCH = (
    "SELECT chat_uuid FROM chats WHERE user_uuid = $1 ORDER BY chat_uuid LIMIT $2 FOR UPDATE"
)
COUNT_ERASED = (
    "SELECT (SELECT count(*) FROM messages WHERE chat_uuid = ANY($1)),"
    " (SELECT count(*) FROM tool_calls WHERE chat_uuid = ANY($1)),"
    " (SELECT count(*) FROM reasonings WHERE chat_uuid = ANY($1)),"
    " (SELECT count(*) FROM runs WHERE chat_uuid = ANY($1)),"
    " (SELECT count(*) FROM summaries WHERE chat_uuid = ANY($1)),"
    " (SELECT count(*) FROM run_events WHERE chat_uuid = ANY($1))"
)
ERASE_CHATS = "DELETE FROM chats WHERE chat_uuid = ANY($1)"
INSERT_RECEIPT = (
    "INSERT INTO erasure_receipts"
    " (receipt_uuid, user_uuid, requested_by, started_at, finished_at, counts)"
    " VALUES ($1, $2, $3, $4, $5, $6::jsonb)"
)
SELECT_RECEIPTS = (
    "SELECT receipt_uuid, user_uuid, requested_by, started_at, finished_at, counts::text"
    " FROM erasure_receipts WHERE $1::uuid IS NULL OR user_uuid = $1"
    " ORDER BY started_at DESC, receipt_uuid DESC"
)


def _summary(row: Any) -> Summary:
    fields = dict(zip(_SUMMARY_COLUMNS, row, strict=True))
    fields["metadata"] = binary_json.loads(fields["metadata"]) if fields["metadata"] else {}
    return Summary.model_validate(fields)


class PostgresLifecycle(LifecycleBackend):
    """Summaries, erasure and retention of a :class:`~threadstore.store.postgres.PostgresStore`."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def _fetch(self, query: str, *args: Any) -> list[Any]:
        return await self.store._fetch(query, *args)

    async def insert_summary(self, summary: Summary) -> None:
        rows = await self._fetch(
            INSERT_SUMMARY,
            summary.summary_uuid,
            summary.chat_uuid,
            summary.first_message_uuid,
            summary.last_message_uuid,
            summary.last_seq,
            summary.message_count,
            summary.content,
            summary.summarizer,
            binary_json.dumps(summary.metadata),
            summary.created_at,
            FORMAT_VERSION,
        )
        if not rows:
            raise NotFoundError(f"chat {summary.chat_uuid} does not exist")

    async def select_summaries(self, chat_uuid: UUID) -> list[Summary]:
        return [_summary(row) for row in await self._fetch(SELECT_SUMMARIES, chat_uuid)]

    async def delete_summary(self, chat_uuid: UUID, summary_uuid: UUID) -> bool:
        return bool(await self._fetch(DELETE_SUMMARY, chat_uuid, summary_uuid))

    async def tombstone(self, user_uuid: UUID, at: datetime) -> None:
        await self._fetch(TOMBSTONE, user_uuid, at)

    async def erase_chats(self, user_uuid: UUID, limit: int) -> tuple[dict[str, int], list[UUID]]:
        store = self.store
        async with store.transaction(), store._connection() as conn:
            chats = [row[0] for row in await store._fetch_on(conn, LOCK_BATCH, user_uuid, limit)]
            if not chats:
                return dict.fromkeys(("chats", *_KINDS), 0), []
            (counts,) = await store._fetch_on(conn, COUNT_ERASED, chats)
            await store._fetch_on(conn, ERASE_CHATS, chats)
        return {"chats": len(chats), **dict(zip(_KINDS, counts, strict=True))}, chats

    async def save_receipt(self, receipt: ErasureReceipt) -> None:
        await self._fetch(
            INSERT_RECEIPT,
            receipt.receipt_uuid,
            receipt.user_uuid,
            receipt.requested_by,
            receipt.started_at,
            receipt.finished_at,
            binary_json.dumps(receipt.counts),
        )

    async def select_receipts(self, user_uuid: UUID | None) -> list[ErasureReceipt]:
        rows = await self._fetch(SELECT_RECEIPTS, user_uuid)
        return [
            ErasureReceipt(
                receipt_uuid=row[0],
                user_uuid=row[1],
                requested_by=row[2],
                started_at=row[3],
                finished_at=row[4],
                counts=binary_json.loads(row[5]),
            )
            for row in rows
        ]


_KINDS = ("messages", "tool_calls", "reasonings", "runs", "summaries", "run_events")
