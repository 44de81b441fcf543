"""The usage ledger: ``store.usage`` over a small backend contract.

Each backend builds one :class:`UsageBackend` (``store._usage``); :class:`Usage` holds
what is the same everywhere: budgets checked against totals, scopes, erasure. Amounts
are kept as whole nano-dollars (``NANO``), so totals are exact sums of what the runs
reported, whatever order they are added in.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from datetime import UTC, datetime, time
from typing import TYPE_CHECKING, Any, NamedTuple
from uuid import UUID

from threadstore import _telemetry
from threadstore.errors import BudgetExceededError, InvalidInputError, NotFoundError
from threadstore.models import utcnow
from threadstore.usage import (
    USAGE_ROWS_PAGE,
    Budget,
    BudgetScope,
    RunUsage,
    ScopedBudget,
    UsageGrouping,
    UsageTotals,
)

if TYPE_CHECKING:
    from threadstore.store._base import Store

__all__ = [
    "NANO",
    "USAGE_COUNTS",
    "Usage",
    "UsageBackend",
    "UsageFilter",
    "nanos",
    "summed",
    "usd",
]

NANO = 1_000_000_000
"""Nano-dollars per dollar: amounts are stored as whole nano-dollars."""


_GROUPINGS = ("chat", "user", "day")


USAGE_COUNTS = ("input_tokens", "output_tokens", "reasoning_tokens", "cached_input_tokens")
"""The token counts of a run's row, as ``RunUsage`` names them."""


def _utc(moment: datetime | None) -> datetime | None:
    """``moment`` with a time zone: a naive one counts as UTC (as everywhere in the store)."""
    return moment.replace(tzinfo=UTC) if moment and moment.tzinfo is None else moment


class UsageFilter(NamedTuple):
    """Which ledger rows a query is about: each filter given (``None``: any) must match;
    ``since`` inclusive, ``until`` exclusive."""

    user_uuid: UUID | None
    chat_uuid: UUID | None
    since: datetime | None
    until: datetime | None

    @classmethod
    def of(
        cls,
        user_uuid: UUID | None,
        chat_uuid: UUID | None,
        since: datetime | None,
        until: datetime | None,
    ) -> UsageFilter:
        """The filter, its times with a time zone."""
        return cls(user_uuid, chat_uuid, _utc(since), _utc(until))


def nanos(amount: float) -> int:
    """``amount`` dollars as whole nano-dollars (how the ledger keeps it)."""
    return round(amount * NANO)


def usd(amount: int) -> float:
    """Whole nano-dollars as dollars."""
    return amount / NANO


class UsageBackend(abc.ABC):
    """The primitives of the usage ledger and budgets of one backend."""

    @abc.abstractmethod
    async def upsert_run(self, usage: RunUsage) -> bool:
        """Keep ``usage`` as its run's row (replacing one kept before); False when its user
        was erased (a late write brings nothing back)."""

    @abc.abstractmethod
    async def select_runs(self, where: UsageFilter, limit: int) -> list[RunUsage]:
        """Ledger rows matching every filter given, newest first."""

    @abc.abstractmethod
    async def select_totals(self, by: UsageGrouping, where: UsageFilter) -> list[UsageTotals]:
        """Sums of the matching rows per chat, user or UTC day, by key."""

    @abc.abstractmethod
    async def upsert_budget(self, budget: ScopedBudget, at: datetime) -> None:
        """Set the budget of a scope, replacing the one it had."""

    @abc.abstractmethod
    async def delete_budget(self, scope: BudgetScope, scope_uuid: UUID) -> bool:
        """Remove the budget of a scope; whether it had one."""

    @abc.abstractmethod
    async def select_budgets(self, user_uuid: UUID, chat_uuid: UUID | None) -> list[ScopedBudget]:
        """The user's own budget and, with ``chat_uuid``, that chat's (both only if set);
        with ``chat_uuid=None``, every budget of the user's."""

    @abc.abstractmethod
    async def erase_user(self, user_uuid: UUID) -> int:
        """Delete the user's ledger rows and budgets; how many rows went."""


class Usage:
    """The usage ledger of a store: what runs used, totals, and budgets that stop runs."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @property
    def kept(self) -> bool:
        """Whether this store keeps a usage ledger (a custom backend may not)."""
        return self._store._usage is not None

    def _backend(self) -> UsageBackend:
        return self._store._required(self._store._usage, "usage ledger")

    async def record(self, usage: RunUsage) -> bool:
        """Keep what a run used (one row per chat and run: recording again replaces it).

        False when the run's user was erased: nothing of theirs is kept again.
        """
        with _telemetry.span("threadstore.usage.record", usage.chat_uuid):
            return await self._backend().upsert_run(usage)

    async def runs(
        self,
        *,
        user_uuid: UUID | None = None,
        chat_uuid: UUID | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = USAGE_ROWS_PAGE,
    ) -> list[RunUsage]:
        """The ledger's rows of a user and/or chat (``None``: any), newest first."""
        if not 1 <= limit <= USAGE_ROWS_PAGE:
            raise InvalidInputError(f"limit must be between 1 and {USAGE_ROWS_PAGE}, got {limit}")
        return await self._backend().select_runs(
            UsageFilter.of(user_uuid, chat_uuid, since, until), limit
        )

    async def totals(
        self,
        *,
        by: UsageGrouping = "chat",
        user_uuid: UUID | None = None,
        chat_uuid: UUID | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[UsageTotals]:
        """Sums of what runs used per chat, per user or per UTC day, of the runs recorded
        in ``[since, until)`` of a user and/or chat (``None``: any), in key order."""
        if by not in _GROUPINGS:
            raise InvalidInputError(f"by must be one of {', '.join(_GROUPINGS)}, got {by!r}")
        with _telemetry.span("threadstore.usage.totals", chat_uuid):
            return await self._backend().select_totals(
                by, UsageFilter.of(user_uuid, chat_uuid, since, until)
            )

    async def total(
        self,
        *,
        user_uuid: UUID | None = None,
        chat_uuid: UUID | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> UsageTotals:
        """One sum over the runs of a user and/or chat (zero when there are none)."""
        sums = await self.totals(
            by="user", user_uuid=user_uuid, chat_uuid=chat_uuid, since=since, until=until
        )
        if not sums:
            return UsageTotals(user_uuid=user_uuid, chat_uuid=chat_uuid)
        if len(sums) == 1:
            return sums[0].model_copy(update={"chat_uuid": chat_uuid})
        # Several users' sums (no user asked for): the total is no one user's.
        return UsageTotals(chat_uuid=chat_uuid, runs=sum(s.runs for s in sums), **summed(sums))

    # --- budgets ---------------------------------------------------------------------

    async def set_budget(
        self, budget: Budget, *, user_uuid: UUID | None = None, chat_uuid: UUID | None = None
    ) -> ScopedBudget:
        """Set the budget of a user's runs, or of one chat's (exactly one of the two)."""
        scope, scope_uuid = _one_scope(user_uuid, chat_uuid)
        owner = scope_uuid
        if scope == "chat":
            chat = await self._store.chats.get_chat(scope_uuid)
            if chat is None:
                raise NotFoundError(f"chat {scope_uuid} does not exist")
            owner = chat.user_uuid
        scoped = ScopedBudget(scope=scope, scope_uuid=scope_uuid, user_uuid=owner, budget=budget)
        await self._backend().upsert_budget(scoped, utcnow())
        return scoped

    async def clear_budget(
        self, *, user_uuid: UUID | None = None, chat_uuid: UUID | None = None
    ) -> bool:
        """Remove the budget of a user or of a chat; whether there was one."""
        return await self._backend().delete_budget(*_one_scope(user_uuid, chat_uuid))

    async def budgets(self, user_uuid: UUID) -> list[ScopedBudget]:
        """Every budget of the user's: their own and their chats'."""
        return await self._backend().select_budgets(user_uuid, None)

    async def check_budget(self, user_uuid: UUID, chat_uuid: UUID | None = None) -> None:
        """Raise :class:`BudgetExceededError` when the user's or the chat's budget is spent.

        One read when no budget applies; then one sum per budget that does.
        """
        for scoped in await self._backend().select_budgets(user_uuid, chat_uuid or _NO_CHAT):
            budget = scoped.budget
            since = None
            if budget.period == "day":
                since = datetime.combine(utcnow().date(), time(), tzinfo=UTC)
            used = await self.total(
                user_uuid=user_uuid,
                chat_uuid=scoped.scope_uuid if scoped.scope == "chat" else None,
                since=since,
            )
            why = budget.spent(used)
            if why is not None:
                whose = "this chat" if scoped.scope == "chat" else "this user"
                period = "today's " if budget.period == "day" else ""
                raise BudgetExceededError(f"the {period}budget of {whose} is spent: {why}")


_NO_CHAT = UUID(int=0)
"""Matches no chat: only the user's own budget applies."""


def _one_scope(user_uuid: UUID | None, chat_uuid: UUID | None) -> tuple[BudgetScope, UUID]:
    """The scope of a budget: a user's or a chat's, given exactly one of the two."""
    if chat_uuid is not None and user_uuid is None:
        return "chat", chat_uuid
    if user_uuid is not None and chat_uuid is None:
        return "user", user_uuid
    raise InvalidInputError("give exactly one of user_uuid and chat_uuid")


def summed(rows: Sequence[RunUsage | UsageTotals]) -> dict[str, Any]:
    """The token counts and amounts of ``rows`` added up (amounts exactly, as nano-dollars)."""
    return {
        **{count: sum(getattr(row, count) for row in rows) for count in USAGE_COUNTS},
        "cost_usd": usd(sum(nanos(row.cost_usd) for row in rows)),
        "cache_savings_usd": usd(sum(nanos(row.cache_savings_usd) for row in rows)),
    }
