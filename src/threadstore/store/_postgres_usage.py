"""The PostgreSQL backend's usage ledger and budgets (``store/_usage.py``).

SQL as module constants with placeholders only; a filter adds fixed fragments, never a
value. Each call borrows a connection of the store (or joins its transaction).
"""

from __future__ import annotations

from datetime import date, datetime
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

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
    from threadstore.store.postgres import PostgresStore

__all__ = ["PostgresUsage"]

UPSERT_RUN = upsert_usage(lambda n: f"${n}")
_DAY = "(recorded_at AT TIME ZONE 'UTC')::date"
_KEYS: dict[str, str] = {
    "chat": "chat_uuid, min(user_uuid::text)",
    "user": "user_uuid",
    "day": _DAY,
}
_GROUP: dict[str, str] = {"chat": "chat_uuid", "user": "user_uuid", "day": _DAY}
_FILTERS = ("user_uuid = ", "chat_uuid = ", "recorded_at >= ", "recorded_at < ")

UPSERT_BUDGET = (
    "INSERT INTO usage_budgets (scope, scope_uuid, user_uuid, max_cost_usd, max_tokens, period,"
    " updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (scope, scope_uuid) DO UPDATE"
    " SET user_uuid = excluded.user_uuid, max_cost_usd = excluded.max_cost_usd,"
    " max_tokens = excluded.max_tokens, period = excluded.period,"
    " updated_at = excluded.updated_at"
)
DELETE_BUDGET = "DELETE FROM usage_budgets WHERE scope = $1 AND scope_uuid = $2 RETURNING 1"
_BUDGET_COLUMNS = "scope, scope_uuid, user_uuid, max_cost_usd, max_tokens, period"
SELECT_BUDGETS = (
    f"SELECT {_BUDGET_COLUMNS} FROM usage_budgets"
    " WHERE (scope = 'user' AND scope_uuid = $1) OR (scope = 'chat' AND scope_uuid = $2)"
    " ORDER BY scope DESC"
)
SELECT_USER_BUDGETS = (
    f"SELECT {_BUDGET_COLUMNS} FROM usage_budgets WHERE user_uuid = $1"
    " ORDER BY scope DESC, scope_uuid"
)
ERASE = (
    "WITH runs AS (DELETE FROM usage_runs WHERE user_uuid = $1 RETURNING 1),"
    " budgets AS (DELETE FROM usage_budgets WHERE user_uuid = $1 RETURNING 1)"
    " SELECT (SELECT count(*) FROM runs) + (SELECT count(*) FROM budgets)"
)


def _where(
    user_uuid: UUID | None, chat_uuid: UUID | None, since: datetime | None, until: datetime | None
) -> tuple[str, list[Any]]:
    """The WHERE clause of the filters given (fixed fragments) and their parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    for fragment, value in zip(_FILTERS, (user_uuid, chat_uuid, since, until), strict=True):
        if value is not None:
            params.append(value)
            clauses.append(f"{fragment}${len(params)}")
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _run(row: Any) -> RunUsage:
    fields = dict(zip(USAGE_COLUMNS, row, strict=True))
    cost, savings = fields.pop("cost_nusd"), fields.pop("cache_savings_nusd")
    return RunUsage(**fields, cost_usd=usd(cost), cache_savings_usd=usd(savings))


def _totals(by: UsageGrouping, row: Any) -> UsageTotals:
    keys = 2 if by == "chat" else 1
    sums = [int(value or 0) for value in list(row)[keys:]]
    key: dict[str, Any]
    if by == "chat":
        key = {"chat_uuid": row[0], "user_uuid": UUID(row[1])}
    elif by == "user":
        key = {"user_uuid": row[0]}
    else:
        key = {"day": cast(date, row[0])}
    return UsageTotals(
        **key,
        runs=sums[0],
        **dict(zip(USAGE_COUNTS, sums[1:5], strict=True)),
        cost_usd=usd(sums[5]),
        cache_savings_usd=usd(sums[6]),
    )


def _budget(row: Any) -> ScopedBudget:
    return ScopedBudget(
        scope=cast(BudgetScope, row[0]),
        scope_uuid=row[1],
        user_uuid=row[2],
        budget=Budget(max_cost_usd=row[3], max_tokens=row[4], period=row[5]),
    )


class PostgresUsage(UsageBackend):
    """The usage ledger of one :class:`~threadstore.store.postgres.PostgresStore`."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def upsert_run(self, usage: RunUsage) -> bool:
        rows = await self.store._fetch(
            UPSERT_RUN,
            usage.chat_uuid,
            usage.run_id,
            usage.user_uuid,
            *(getattr(usage, c) for c in USAGE_COUNTS),
            nanos(usage.cost_usd),
            nanos(usage.cache_savings_usd),
            usage.model,
            usage.source,
            usage.recorded_at,
        )
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
        order = f" ORDER BY recorded_at DESC, run_id DESC LIMIT ${len(params) + 1}"
        rows = await self.store._fetch(SELECT_USAGE + where + order, *params, limit)
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
        keys, group = _KEYS[by], _GROUP[by]
        sql = f"SELECT {keys}, {USAGE_SUMS} FROM usage_runs{where} GROUP BY {group} ORDER BY 1"
        return [_totals(by, row) for row in await self.store._fetch(sql, *params)]

    async def upsert_budget(self, budget: ScopedBudget, at: datetime) -> None:
        limits = budget.budget
        await self.store._fetch(
            UPSERT_BUDGET,
            budget.scope,
            budget.scope_uuid,
            budget.user_uuid,
            limits.max_cost_usd,
            limits.max_tokens,
            limits.period,
            at,
        )

    async def delete_budget(self, scope: BudgetScope, scope_uuid: UUID) -> bool:
        return bool(await self.store._fetch(DELETE_BUDGET, scope, scope_uuid))

    async def select_budgets(self, user_uuid: UUID, chat_uuid: UUID | None) -> list[ScopedBudget]:
        if chat_uuid is None:
            rows = await self.store._fetch(SELECT_USER_BUDGETS, user_uuid)
        else:
            rows = await self.store._fetch(SELECT_BUDGETS, user_uuid, chat_uuid)
        return [_budget(row) for row in rows]

    async def erase_user(self, user_uuid: UUID) -> int:
        ((count,),) = await self.store._fetch(ERASE, user_uuid)
        return int(count)
