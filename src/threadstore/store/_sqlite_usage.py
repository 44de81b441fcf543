"""The SQLite backend's usage ledger and budgets (``store/_sql_usage.py``).

Writes run through the store's executor, reads on the reader connection; a run's
time is kept in UTC, so the ledger's times sort as text.
"""

from __future__ import annotations

from datetime import UTC
from typing import TYPE_CHECKING
from uuid import UUID

from threadstore.store._sql_usage import SQLUsage, UsageSQL
from threadstore.store._sqlite_executor import SQLiteDriver
from threadstore.store._sqlite_sql import ts
from threadstore.store._sqlite_writes import Statement

if TYPE_CHECKING:
    from threadstore.store.sqlite import SQLiteStore

__all__ = ["SQLiteUsage"]

SQL = UsageSQL(lambda n: f"?{n}", chat_user="user_uuid", day="substr(recorded_at, 1, 10)")
ERASE_RUNS = "DELETE FROM usage_runs WHERE user_uuid = ? RETURNING 1"
ERASE_BUDGETS = "DELETE FROM usage_budgets WHERE user_uuid = ? RETURNING 1"


class SQLiteUsage(SQLiteDriver, SQLUsage):
    """The usage ledger of one :class:`~threadstore.store.sqlite.SQLiteStore`."""

    sql = SQL
    # A run reports its own time, in any zone.
    time_param = staticmethod(lambda value: ts(value.astimezone(UTC)))

    def __init__(self, store: SQLiteStore) -> None:
        self.executor = store.executor

    async def erase_user(self, user_uuid: UUID) -> int:
        params = (str(user_uuid),)
        runs, budgets = await self.executor.run(
            Statement(ERASE_RUNS, params, inline=False),
            Statement(ERASE_BUDGETS, params, inline=False),
        )
        return len(runs) + len(budgets)
