"""The SQLite backend's usage ledger and budgets (``store/_usage.py``).

SQL as module constants with placeholders only; a filter adds fixed fragments, never a
value. Writes run through the store's executor, reads on the reader connection.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

from threadstore.store._sqlite_sql import ts
from threadstore.store._sqlite_writes import Statement
from threadstore.store._usage import (
    SELECT_USAGE,
    USAGE_COLUMNS,
    USAGE_COUNTS,
    USAGE_SUMS,
    UsageBackend,
    nanos,
    upsert_usage,
    usd,
)
from threadstore.usage import (
    Budget,
    BudgetScope,
    RunUsage,
    ScopedBudget,
    UsageGrouping,
    UsageTotals,
)

if TYPE_CHECKING:
    from threadstore.store.sqlite import SQLiteStore

__all__ = ["SQLiteUsage"]

UPSERT_RUN = upsert_usage(lambda n: f"?{n}")
_KEYS: dict[str, str] = {
    "chat": "chat_uuid, min(user_uuid)",
    "user": "user_uuid",
    "day": "substr(recorded_at, 1, 10)",
}
_GROUP: dict[str, str] = {"chat": "chat_uuid", "user": "user_uuid", "day": "1"}
_FILTERS = (" user_uuid = ?", " chat_uuid = ?", " recorded_at >= ?", " recorded_at < ?")

UPSERT_BUDGET = (
    "INSERT INTO usage_budgets (scope, scope_uuid, user_uuid, max_cost_usd, max_tokens, period,"
    " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (scope, scope_uuid) DO UPDATE SET"
    " user_uuid = excluded.user_uuid, max_cost_usd = excluded.max_cost_usd,"
    " max_tokens = excluded.max_tokens, period = excluded.period,"
    " updated_at = excluded.updated_at"
)
DELETE_BUDGET = "DELETE FROM usage_budgets WHERE scope = ? AND scope_uuid = ? RETURNING 1"
_BUDGET_COLUMNS = "scope, scope_uuid, user_uuid, max_cost_usd, max_tokens, period"
SELECT_BUDGETS = (
    f"SELECT {_BUDGET_COLUMNS} FROM usage_budgets"
    " WHERE (scope = 'user' AND scope_uuid = ?1) OR (scope = 'chat' AND scope_uuid = ?2)"
    " ORDER BY scope DESC"
)
SELECT_USER_BUDGETS = (
    f"SELECT {_BUDGET_COLUMNS} FROM usage_budgets WHERE user_uuid = ? ORDER BY scope DESC,"
    " scope_uuid"
)
ERASE_RUNS = "DELETE FROM usage_runs WHERE user_uuid = ? RETURNING 1"
ERASE_BUDGETS = "DELETE FROM usage_budgets WHERE user_uuid = ? RETURNING 1"


def _where(
    user_uuid: UUID | None, chat_uuid: UUID | None, since: datetime | None, until: datetime | None
) -> tuple[str, list[Any]]:
    """The WHERE clause of the filters given (fixed fragments) and their parameters."""
    given = (user_uuid, chat_uuid, since, until)
    clauses = [f for f, value in zip(_FILTERS, given, strict=True) if value is not None]
    params = [
        ts(value.astimezone(UTC)) if isinstance(value, datetime) else str(value)
        for value in given
        if value is not None
    ]
    return (" WHERE" + " AND".join(clauses) if clauses else ""), params


def _run(row: Any) -> RunUsage:
    fields = dict(zip(USAGE_COLUMNS, row, strict=True))
    return RunUsage(
        chat_uuid=UUID(fields["chat_uuid"]),
        run_id=fields["run_id"],
        user_uuid=UUID(fields["user_uuid"]),
        model=fields["model"],
        source=fields["source"],
        recorded_at=datetime.fromisoformat(fields["recorded_at"]),
        cost_usd=usd(fields["cost_nusd"]),
        cache_savings_usd=usd(fields["cache_savings_nusd"]),
        **{c: fields[c] for c in USAGE_COUNTS},
    )


def _totals(by: UsageGrouping, row: Any) -> UsageTotals:
    keys = {"chat": 2, "user": 1, "day": 1}[by]
    sums = row[keys:]
    key: dict[str, Any] = {}
    if by == "chat":
        key = {"chat_uuid": UUID(row[0]), "user_uuid": UUID(row[1])}
    elif by == "user":
        key = {"user_uuid": UUID(row[0])}
    else:
        key = {"day": date.fromisoformat(row[0])}
    return UsageTotals(
        **key,
        runs=sums[0],
        **dict(zip(USAGE_COUNTS, (int(v or 0) for v in sums[1:5]), strict=True)),
        cost_usd=usd(int(sums[5] or 0)),
        cache_savings_usd=usd(int(sums[6] or 0)),
    )


def _budget(row: Any) -> ScopedBudget:
    return ScopedBudget(
        scope=cast(BudgetScope, row[0]),
        scope_uuid=UUID(row[1]),
        user_uuid=UUID(row[2]),
        budget=Budget(max_cost_usd=row[3], max_tokens=row[4], period=row[5]),
    )


class SQLiteUsage(UsageBackend):
    """The usage ledger of one :class:`~threadstore.store.sqlite.SQLiteStore`."""

    def __init__(self, store: SQLiteStore) -> None:
        self.executor = store.executor

    async def upsert_run(self, usage: RunUsage) -> bool:
        params = (
            str(usage.chat_uuid),
            usage.run_id,
            str(usage.user_uuid),
            *(getattr(usage, c) for c in USAGE_COUNTS),
            nanos(usage.cost_usd),
            nanos(usage.cache_savings_usd),
            usage.model,
            usage.source,
            ts(usage.recorded_at.astimezone(UTC)),
        )
        (rows,) = await self.executor.run(Statement(UPSERT_RUN, params))
        return bool(rows)

    async def select_runs(
        self,
        user_uuid: UUID | None,
        chat_uuid: UUID | None,
        since: datetime | None,
        until: datetime | None,
        limit: int,
    ) -> list[RunUsage]:
        where, params = _where(user_uuid, chat_uuid, since, until)
        sql = f"{SELECT_USAGE}{where} ORDER BY recorded_at DESC, run_id DESC LIMIT ?"
        rows = await self.executor.read(sql, [*params, limit])
        return [_run(row) for row in rows]

    async def select_totals(
        self,
        by: UsageGrouping,
        user_uuid: UUID | None,
        chat_uuid: UUID | None,
        since: datetime | None,
        until: datetime | None,
    ) -> list[UsageTotals]:
        where, params = _where(user_uuid, chat_uuid, since, until)
        group = _GROUP[by] if by != "day" else "substr(recorded_at, 1, 10)"
        sql = f"SELECT {_KEYS[by]}, {USAGE_SUMS} FROM usage_runs{where} GROUP BY {group} ORDER BY 1"
        rows = await self.executor.read(sql, params)
        return [_totals(by, row) for row in rows]

    async def upsert_budget(self, budget: ScopedBudget, at: datetime) -> None:
        limits = budget.budget
        params = (
            budget.scope,
            str(budget.scope_uuid),
            str(budget.user_uuid),
            limits.max_cost_usd,
            limits.max_tokens,
            limits.period,
            ts(at),
        )
        await self.executor.run(Statement(UPSERT_BUDGET, params))

    async def delete_budget(self, scope: BudgetScope, scope_uuid: UUID) -> bool:
        (rows,) = await self.executor.run(Statement(DELETE_BUDGET, (scope, str(scope_uuid))))
        return bool(rows)

    async def select_budgets(self, user_uuid: UUID, chat_uuid: UUID | None) -> list[ScopedBudget]:
        if chat_uuid is None:
            rows = await self.executor.read(SELECT_USER_BUDGETS, (str(user_uuid),), small=True)
        else:
            params = (str(user_uuid), str(chat_uuid))
            rows = await self.executor.read(SELECT_BUDGETS, params, small=True)
        return [_budget(row) for row in rows]

    async def erase_user(self, user_uuid: UUID) -> int:
        params = (str(user_uuid),)
        runs, budgets = await self.executor.run(
            Statement(ERASE_RUNS, params, inline=False),
            Statement(ERASE_BUDGETS, params, inline=False),
        )
        return len(runs) + len(budgets)
