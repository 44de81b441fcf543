"""The usage ledger's records: what a run used (tokens, cost), totals, and budgets.

Where a run's usage comes from, in the order a run reports it:

- ``CUSTOM`` events named :data:`USAGE_EVENT_NAME` (``"usage"``), one per model call
  or step; their values add up. The value is a :class:`UsageReport` (snake_case or the
  wire's camelCase keys): token counts, ``cost_usd`` and ``cache_savings_usd``.
- ``RUN_FINISHED.usage`` / ``RUN_ERROR.usage`` (AG-UI's ``TokenUsage`` entries, one per
  provider and model): the run's own token totals. When the terminal event carries
  them they are the run's tokens, replacing the sum of the ``CUSTOM`` reports' tokens
  (those would count the same calls twice); cost still comes from the ``CUSTOM``
  reports, as ``TokenUsage`` carries none.
- A framework face's own numbers (the Agents SDK's run usage, LangChain's
  ``usage_metadata``), which it records through the store's ``usage`` group.

One :class:`RunUsage` row per (chat, run) is kept; recording it again replaces it, so a
retried write never counts a run twice.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from threadstore.errors import ErrorCodes
from threadstore.models import utcnow

__all__ = [
    "BUDGET_EXCEEDED_ERROR_CODE",
    "USAGE_EVENT_NAME",
    "USAGE_ROWS_PAGE",
    "Budget",
    "BudgetScope",
    "RunUsage",
    "ScopedBudget",
    "UsageGrouping",
    "UsageReport",
    "UsageTotals",
    "total_of",
]

USAGE_EVENT_NAME = "usage"
"""The ``CUSTOM`` event name a run reports usage under (one event per model call or step)."""

USAGE_ROWS_PAGE = 1000
"""The most ledger rows one ``store.usage.runs`` call (or ``GET /api/usage/runs``) returns."""

BUDGET_EXCEEDED_ERROR_CODE = ErrorCodes.BUDGET_EXCEEDED.value
"""``RunErrorEvent.code`` of a run refused because a budget is spent (HTTP: 402,
``budget_exceeded``)."""

UsageGrouping = Literal["chat", "user", "day"]
"""What :class:`UsageTotals` are summed by: per chat, per user, or per UTC day."""

BudgetScope = Literal["user", "chat"]
"""Whom a budget is for: all of a user's chats, or one chat."""

MAX_TOKENS = 2**53 - 1
"""The largest token count kept: what survives JSON on every AG-UI binding."""


_AMOUNTS = (
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cached_input_tokens",
    "cost_usd",
    "cache_savings_usd",
)
"""The fields of a :class:`UsageReport` that add up."""


def _field(name: str) -> Any:
    camel = name.split("_")[0] + "".join(part.title() for part in name.split("_")[1:])
    return Field(default=0, ge=0, validation_alias=AliasChoices(name, camel))


class _Tokens:
    if TYPE_CHECKING:  # the models' own fields, in their own order
        input_tokens: int
        output_tokens: int

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


class UsageReport(_Tokens, BaseModel):
    """One report of usage: a ``CUSTOM`` usage event's value, or a face's numbers.

    Keys in snake_case or the wire's camelCase; unknown keys are ignored. Counts
    follow AG-UI's accounting: ``cached_input_tokens`` and ``reasoning_tokens`` are
    parts of ``input_tokens`` and ``output_tokens``, never additions to them.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    input_tokens: int = _field("input_tokens")
    output_tokens: int = _field("output_tokens")
    reasoning_tokens: int = _field("reasoning_tokens")
    cached_input_tokens: int = _field("cached_input_tokens")
    cost_usd: float = _field("cost_usd")
    cache_savings_usd: float = _field("cache_savings_usd")
    model: str | None = Field(default=None, max_length=200)

    @field_validator("input_tokens", "output_tokens", "reasoning_tokens", "cached_input_tokens")
    @classmethod
    def _bounded(cls, value: int) -> int:
        if value > MAX_TOKENS:
            raise ValueError(f"a token count is at most {MAX_TOKENS}")
        return value

    @field_validator("cost_usd", "cache_savings_usd")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("an amount must be a finite number")
        return value

    def __add__(self, other: UsageReport) -> UsageReport:
        sums = {name: getattr(self, name) + getattr(other, name) for name in _AMOUNTS}
        return UsageReport(**sums, model=other.model or self.model)


def total_of(reports: Iterable[UsageReport]) -> UsageReport:
    """The sum of ``reports`` (zero when there are none)."""
    total = UsageReport()
    for report in reports:
        total = total + report
    return total


class RunUsage(_Tokens, BaseModel):
    """What one run used: one row of the ledger, keyed by (chat, run)."""

    model_config = ConfigDict(frozen=True)

    chat_uuid: UUID
    run_id: str = Field(min_length=1, max_length=512)
    user_uuid: UUID
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    reasoning_tokens: int = Field(default=0, ge=0)
    cached_input_tokens: int = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0)
    cache_savings_usd: float = Field(default=0.0, ge=0)
    model: str | None = None
    source: str = "stream"
    """Where the numbers came from: ``stream`` (the run's events) or a face's name."""
    recorded_at: datetime = Field(default_factory=utcnow)
    """When it was recorded; a time without a zone counts as UTC."""

    @field_validator("recorded_at")
    @classmethod
    def _zoned(cls, value: datetime) -> datetime:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value

    @classmethod
    def of(
        cls,
        chat_uuid: UUID,
        run_id: str,
        user_uuid: UUID,
        report: UsageReport,
        *,
        source: str = "stream",
    ) -> RunUsage:
        """The ledger row of a run that reported ``report``."""
        return cls(
            chat_uuid=chat_uuid,
            run_id=run_id,
            user_uuid=user_uuid,
            source=source,
            **report.model_dump(),
        )


class UsageTotals(_Tokens, BaseModel):
    """Sums over the ledger's runs of one chat, user or UTC day."""

    model_config = ConfigDict(frozen=True)

    chat_uuid: UUID | None = None
    user_uuid: UUID | None = None
    day: date | None = None
    runs: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cached_input_tokens: int = 0
    cost_usd: float = 0.0
    cache_savings_usd: float = 0.0


class Budget(BaseModel):
    """A limit on what runs may use: a run starts only while what was used is below it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_cost_usd: float | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    period: Literal["total", "day"] = "total"
    """Over what the usage counts: every run (``total``) or today's (UTC ``day``)."""

    @field_validator("max_cost_usd")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("max_cost_usd must be a finite number")
        return value

    def spent(self, used: UsageTotals) -> str | None:
        """Why ``used`` exhausts this budget, or ``None`` when it does not."""
        if self.max_cost_usd is not None and used.cost_usd >= self.max_cost_usd:
            return f"cost {used.cost_usd:.6g} USD reached the budget of {self.max_cost_usd:.6g}"
        if self.max_tokens is not None and used.total_tokens >= self.max_tokens:
            return f"{used.total_tokens} tokens reached the budget of {self.max_tokens}"
        return None


class ScopedBudget(BaseModel):
    """A budget with whom it is for."""

    model_config = ConfigDict(frozen=True)

    scope: BudgetScope
    scope_uuid: UUID
    user_uuid: UUID
    """The user it limits (for a chat's budget, the chat's user)."""
    budget: Budget
