"""The SQLite backend's usage ledger and budgets (``store/_sql_usage.py``).

Writes run through the store's executor, reads on the reader connection; uuids are
kept as text, times as fixed-width UTC ISO text.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from threadstore.store._sql_usage import SQLUsage, UsageSQL
from threadstore.store._sqlite_sql import ts
from threadstore.store._sqlite_writes import Statement

if TYPE_CHECKING:
    from threadstore.store.sqlite import SQLiteStore

__all__ = ["SQLiteUsage"]

SQL = UsageSQL(lambda n: f"?{n}", chat_user="user_uuid", day="substr(recorded_at, 1, 10)")
ERASE_RUNS = "DELETE FROM usage_runs WHERE user_uuid = ? RETURNING 1"
ERASE_BUDGETS = "DELETE FROM usage_budgets WHERE user_uuid = ? RETURNING 1"


def _utc_text(moment: datetime) -> str:
    return ts(moment.astimezone(UTC))


class SQLiteUsage(SQLUsage):
    """The usage ledger of one :class:`~threadstore.store.sqlite.SQLiteStore`."""

    sql = SQL
    uuid_param = staticmethod(str)
    time_param = staticmethod(_utc_text)
    uuid_value = staticmethod(UUID)
    time_value = staticmethod(datetime.fromisoformat)
    day_value = staticmethod(date.fromisoformat)

    def __init__(self, store: SQLiteStore) -> None:
        self.executor = store.executor

    async def _write(self, sql: str, params: Sequence[Any]) -> list[Any]:
        (rows,) = await self.executor.run(Statement(sql, tuple(params)))
        return rows

    async def _read(self, sql: str, params: Sequence[Any], small: bool = False) -> list[Any]:
        return await self.executor.read(sql, params, small=small)

    async def erase_user(self, user_uuid: UUID) -> int:
        params = (str(user_uuid),)
        runs, budgets = await self.executor.run(
            Statement(ERASE_RUNS, params, inline=False),
            Statement(ERASE_BUDGETS, params, inline=False),
        )
        return len(runs) + len(budgets)
