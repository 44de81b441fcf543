"""The usage ledger on SQL tables (``usage_runs``, ``usage_budgets``), for both SQL backends.

Both schemas give the ledger the same tables and columns, so its statements, their
parameters and the decoding of their rows are written once here: a backend names its
placeholder and its SQL for a UTC day (:class:`UsageSQL`), and its driver
(``store/_sql_driver.py``). Statements take
placeholders only; a filter adds fixed fragments, never a value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, cast
from uuid import UUID

from threadstore.store._sql_driver import SQLDriver
from threadstore.store._usage import USAGE_COUNTS, UsageBackend, UsageFilter, nanos, usd
from threadstore.usage import (
    Budget,
    BudgetScope,
    RunUsage,
    ScopedBudget,
    UsageGrouping,
    UsageTotals,
)

__all__ = ["USAGE_COLUMNS", "SQLUsage", "UsageSQL"]

USAGE_COLUMNS = (
    "chat_uuid",
    "run_id",
    "user_uuid",
    *USAGE_COUNTS,
    "cost_nusd",
    "cache_savings_nusd",
    "model",
    "source",
    "recorded_at",
)
"""The columns of ``usage_runs``, in the order their statements use."""

_SUMS = "count(*), " + ", ".join(
    f"sum({c})" for c in (*USAGE_COUNTS, "cost_nusd", "cache_savings_nusd")
)
"""What a total sums, after its key columns."""

_BUDGET_COLUMNS = ("scope", "scope_uuid", "user_uuid", "max_cost_usd", "max_tokens", "period")
_FILTERS = ("user_uuid = ", "chat_uuid = ", "recorded_at >= ", "recorded_at < ")


class UsageSQL:
    """The ledger's statements in one backend's dialect.

    ``param(n)``: the n-th placeholder; ``chat_user``: a chat's user as one aggregate
    picks it; ``day``: a row's UTC day.
    """

    def __init__(self, param: Callable[[int], str], *, chat_user: str, day: str) -> None:
        self.param = param
        self.keys: dict[str, str] = {
            "chat": f"chat_uuid, min({chat_user})",
            "user": "user_uuid",
            "day": day,
        }
        self.group: dict[str, str] = {"chat": "chat_uuid", "user": "user_uuid", "day": day}
        # Nothing is kept for an erased user: a run still finishing writes nothing back.
        self.upsert_run = (
            f"INSERT INTO usage_runs ({', '.join(USAGE_COLUMNS)})"
            f" SELECT {self._params(len(USAGE_COLUMNS))}"
            " WHERE NOT EXISTS (SELECT 1 FROM erased_users WHERE user_uuid = "
            f"{param(3)}) ON CONFLICT (chat_uuid, run_id) DO UPDATE SET "
            + ", ".join(f"{c} = excluded.{c}" for c in USAGE_COLUMNS[2:])
            + " RETURNING 1"
        )
        self.select_runs = f"SELECT {', '.join(USAGE_COLUMNS)} FROM usage_runs"
        self.upsert_budget = (
            f"INSERT INTO usage_budgets ({', '.join(_BUDGET_COLUMNS)}, updated_at)"
            f" VALUES ({self._params(7)}) ON CONFLICT (scope, scope_uuid) DO UPDATE SET "
            + ", ".join(f"{c} = excluded.{c}" for c in (*_BUDGET_COLUMNS[2:], "updated_at"))
        )
        self.delete_budget = (
            f"DELETE FROM usage_budgets WHERE scope = {param(1)} AND scope_uuid = {param(2)}"
            " RETURNING 1"
        )
        budgets = f"SELECT {', '.join(_BUDGET_COLUMNS)} FROM usage_budgets"
        self.select_budgets = (
            f"{budgets} WHERE (scope = 'user' AND scope_uuid = {param(1)})"
            f" OR (scope = 'chat' AND scope_uuid = {param(2)}) ORDER BY scope DESC"
        )
        self.select_user_budgets = (
            f"{budgets} WHERE user_uuid = {param(1)} ORDER BY scope DESC, scope_uuid"
        )

    def _params(self, count: int) -> str:
        return ", ".join(self.param(n) for n in range(1, count + 1))

    def where(self, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """The WHERE clause of the filters given (``None``: not given), and their values."""
        clauses: list[str] = []
        given: list[Any] = []
        for fragment, value in zip(_FILTERS, values, strict=True):
            if value is not None:
                given.append(value)
                clauses.append(fragment + self.param(len(given)))
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), given


class SQLUsage(SQLDriver, UsageBackend):
    """:class:`UsageBackend` on the ledger's tables; a backend says how it runs statements."""

    sql: UsageSQL

    async def upsert_run(self, usage: RunUsage) -> bool:
        rows = await self._write(
            self.sql.upsert_run,
            (
                self.uuid_param(usage.chat_uuid),
                usage.run_id,
                self.uuid_param(usage.user_uuid),
                *(getattr(usage, c) for c in USAGE_COUNTS),
                nanos(usage.cost_usd),
                nanos(usage.cache_savings_usd),
                usage.model,
                usage.source,
                self.time_param(usage.recorded_at),
            ),
        )
        return bool(rows)

    def _where(self, where: UsageFilter) -> tuple[str, list[Any]]:
        encoded = [
            None
            if value is None
            else self.time_param(value)
            if isinstance(value, datetime)
            else self.uuid_param(value)
            for value in where
        ]
        return self.sql.where(encoded)

    async def select_runs(self, where: UsageFilter, limit: int) -> list[RunUsage]:
        clause, params = self._where(where)
        order = f" ORDER BY recorded_at DESC, run_id DESC LIMIT {self.sql.param(len(params) + 1)}"
        rows = await self._read(self.sql.select_runs + clause + order, [*params, limit])
        return [self._run(row) for row in rows]

    def _run(self, row: Any) -> RunUsage:
        fields = dict(zip(USAGE_COLUMNS, row, strict=True))
        cost, savings = fields.pop("cost_nusd"), fields.pop("cache_savings_nusd")
        for name in ("chat_uuid", "user_uuid"):
            fields[name] = self.uuid_value(fields[name])
        fields["recorded_at"] = self.time_value(fields["recorded_at"])
        return RunUsage(**fields, cost_usd=usd(cost), cache_savings_usd=usd(savings))

    async def select_totals(self, by: UsageGrouping, where: UsageFilter) -> list[UsageTotals]:
        clause, params = self._where(where)
        keys, group = self.sql.keys[by], self.sql.group[by]
        sql = f"SELECT {keys}, {_SUMS} FROM usage_runs{clause} GROUP BY {group} ORDER BY 1"
        return [self._totals(by, row) for row in await self._read(sql, params)]

    def _totals(self, by: UsageGrouping, row: Any) -> UsageTotals:
        keys = 2 if by == "chat" else 1
        sums = [int(value or 0) for value in list(row)[keys:]]
        key: dict[str, Any]
        if by == "chat":
            key = {"chat_uuid": self.uuid_value(row[0]), "user_uuid": UUID(row[1])}
        elif by == "user":
            key = {"user_uuid": self.uuid_value(row[0])}
        else:
            key = {"day": self.day_value(row[0])}
        return UsageTotals(
            **key,
            runs=sums[0],
            **dict(zip(USAGE_COUNTS, sums[1:5], strict=True)),
            cost_usd=usd(sums[5]),
            cache_savings_usd=usd(sums[6]),
        )

    async def upsert_budget(self, budget: ScopedBudget, at: datetime) -> None:
        limits = budget.budget
        params = (
            budget.scope,
            self.uuid_param(budget.scope_uuid),
            self.uuid_param(budget.user_uuid),
            limits.max_cost_usd,
            limits.max_tokens,
            limits.period,
            self.time_param(at),
        )
        await self._write(self.sql.upsert_budget, params)

    async def delete_budget(self, scope: BudgetScope, scope_uuid: UUID) -> bool:
        return bool(await self._write(self.sql.delete_budget, (scope, self.uuid_param(scope_uuid))))

    async def select_budgets(self, user_uuid: UUID, chat_uuid: UUID | None) -> list[ScopedBudget]:
        sql, params = self.sql.select_user_budgets, [self.uuid_param(user_uuid)]
        if chat_uuid is not None:
            sql = self.sql.select_budgets
            params.append(self.uuid_param(chat_uuid))
        return [
            ScopedBudget(
                scope=cast(BudgetScope, row[0]),
                scope_uuid=self.uuid_value(row[1]),
                user_uuid=self.uuid_value(row[2]),
                budget=Budget(max_cost_usd=row[3], max_tokens=row[4], period=row[5]),
            )
            for row in await self._read(sql, params, small=True)
        ]
