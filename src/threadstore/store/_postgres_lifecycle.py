"""The PostgreSQL backend's primitives of a conversation's life: summaries, erasure, retention.

SQL as module constants with placeholders only; each call borrows a connection of the
store (or joins its transaction), as the store's own statements do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from threadstore import binary_json
from threadstore.errors import NotFoundError
from threadstore.models import FORMAT_VERSION, Summary
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
