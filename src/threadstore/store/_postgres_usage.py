"""The PostgreSQL backend's usage ledger and budgets (``store/_sql_usage.py``).

Each call borrows a connection of the store (or joins its transaction).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

from threadstore.store._postgres_connections import PostgresDriver
from threadstore.store._sql_usage import SQLUsage, UsageSQL

if TYPE_CHECKING:
    from threadstore.store.postgres import PostgresStore

__all__ = ["PostgresUsage"]

SQL = UsageSQL(
    lambda n: f"${n}",
    chat_user="user_uuid::text",
    day="(recorded_at AT TIME ZONE 'UTC')::date",
)
ERASE = (
    "WITH runs AS (DELETE FROM usage_runs WHERE user_uuid = $1 RETURNING 1),"
    " budgets AS (DELETE FROM usage_budgets WHERE user_uuid = $1 RETURNING 1)"
    " SELECT (SELECT count(*) FROM runs) + (SELECT count(*) FROM budgets)"
)


class PostgresUsage(PostgresDriver, SQLUsage):
    """The usage ledger of one :class:`~threadstore.store.postgres.PostgresStore`."""

    sql = SQL

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def erase_user(self, user_uuid: UUID) -> int:
        ((count,),) = await self.store._fetch(ERASE, user_uuid)
        return int(count)
