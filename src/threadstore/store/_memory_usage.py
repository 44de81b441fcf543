"""The in-memory backend's usage ledger and budgets (``store/_usage.py``).

Kept as the SQL backends keep them: amounts in whole nano-dollars, one row per (chat,
run), rows replaced rather than changed, nothing kept for an erased user.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from threadstore.store._usage import UsageBackend, UsageFilter, nanos, summed, usd
from threadstore.usage import (
    BudgetScope,
    RunUsage,
    ScopedBudget,
    UsageGrouping,
    UsageTotals,
)

if TYPE_CHECKING:
    from threadstore.store.memory import MemoryStore

__all__ = ["MemoryUsage"]


_KEYS: dict[str, Callable[[RunUsage], Any]] = {
    "chat": lambda usage: usage.chat_uuid,
    "user": lambda usage: usage.user_uuid,
    "day": lambda usage: usage.recorded_at.astimezone(UTC).date(),
}


class MemoryUsage(UsageBackend):
    """The usage ledger of one :class:`~threadstore.store.memory.MemoryStore`."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.runs: dict[tuple[UUID, str], RunUsage] = {}
        self.budgets: dict[tuple[str, UUID], ScopedBudget] = {}

    async def upsert_run(self, usage: RunUsage) -> bool:
        async with self.store._lock.hold():
            if usage.user_uuid in self.store._state.erased:
                return False
            # Rounded as the SQL backends keep it: whole nano-dollars.
            kept = usage.model_copy(
                update={
                    "cost_usd": usd(nanos(usage.cost_usd)),
                    "cache_savings_usd": usd(nanos(usage.cache_savings_usd)),
                }
            )
            self.runs[(usage.chat_uuid, usage.run_id)] = kept
            return True

    def _matching(self, where: UsageFilter) -> list[RunUsage]:
        user_uuid, chat_uuid, since, until = where
        return [
            usage
            for usage in self.runs.values()
            if (user_uuid is None or usage.user_uuid == user_uuid)
            and (chat_uuid is None or usage.chat_uuid == chat_uuid)
            and (since is None or usage.recorded_at >= since)
            and (until is None or usage.recorded_at < until)
        ]

    async def select_runs(self, where: UsageFilter, limit: int) -> list[RunUsage]:
        found = self._matching(where)
        found.sort(key=lambda usage: (usage.recorded_at, usage.run_id), reverse=True)
        return found[:limit]

    async def select_totals(self, by: UsageGrouping, where: UsageFilter) -> list[UsageTotals]:
        groups: dict[Any, list[RunUsage]] = {}
        for usage in self._matching(where):
            groups.setdefault(_KEYS[by](usage), []).append(usage)
        totals = []
        for key in sorted(groups, key=str):
            rows = groups[key]
            named: dict[str, Any] = {
                "chat": {"chat_uuid": key, "user_uuid": rows[0].user_uuid},
                "user": {"user_uuid": key},
                "day": {"day": key},
            }[by]
            totals.append(UsageTotals(**named, runs=len(rows), **summed(rows)))
        return totals

    async def upsert_budget(self, budget: ScopedBudget, at: datetime) -> None:
        async with self.store._lock.hold():
            self.budgets[(budget.scope, budget.scope_uuid)] = budget

    async def delete_budget(self, scope: BudgetScope, scope_uuid: UUID) -> bool:
        async with self.store._lock.hold():
            return self.budgets.pop((scope, scope_uuid), None) is not None

    async def select_budgets(self, user_uuid: UUID, chat_uuid: UUID | None) -> list[ScopedBudget]:
        if chat_uuid is None:
            found = [b for b in self.budgets.values() if b.user_uuid == user_uuid]
            return sorted(found, key=lambda b: (b.scope != "user", str(b.scope_uuid)))
        wanted = (("user", user_uuid), ("chat", chat_uuid))
        return [self.budgets[key] for key in wanted if key in self.budgets]

    async def erase_user(self, user_uuid: UUID) -> int:
        async with self.store._lock.hold():
            kept = len(self.runs) + len(self.budgets)
            self.runs = {k: u for k, u in self.runs.items() if u.user_uuid != user_uuid}
            self.budgets = {k: b for k, b in self.budgets.items() if b.user_uuid != user_uuid}
            return kept - len(self.runs) - len(self.budgets)
