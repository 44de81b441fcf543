"""The usage ledger over HTTP: the caller's totals and runs, and the budgets they set.

Everything is the caller's own: totals and runs of their chats, budgets of theirs or
of one of their chats (another user's chat answers 404 like one that does not exist).
A run whose user's or chat's budget is spent is refused by ``POST /agui`` with a 402,
code ``budget_exceeded``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, HTTPException, Query, Response, status
from pydantic import BaseModel, Field

from threadstore.server._deps import AppState, CurrentUser, owned_chat
from threadstore.usage import (
    USAGE_ROWS_PAGE,
    Budget,
    RunUsage,
    ScopedBudget,
    UsageGrouping,
    UsageTotals,
)

__all__ = ["BudgetRequest", "UsageReply", "router"]

router = APIRouter(prefix="/api/usage", tags=["usage"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such chat of mine."}}


class UsageReply(BaseModel):
    """The caller's usage: sums per chat, user or day, and their sum."""

    by: UsageGrouping
    totals: list[UsageTotals]
    total: UsageTotals


class BudgetRequest(Budget):
    """A budget for the caller's runs, or (with ``chat_uuid``) for one of their chats."""

    chat_uuid: UUID | None = Field(default=None, description="One chat's budget instead.")


@router.get(
    "",
    response_model=UsageReply,
    summary="My usage: tokens and cost per chat, per day, or in all",
    responses=_NOT_FOUND,
)
async def usage_totals(
    state: AppState,
    user: CurrentUser,
    by: Annotated[UsageGrouping, Query(description="Sum per chat, per UTC day, or per user.")] = (
        "chat"
    ),
    chat_uuid: Annotated[UUID | None, Query(description="Only this chat of mine.")] = None,
    since: Annotated[datetime | None, Query(description="Runs recorded at or after.")] = None,
    until: Annotated[datetime | None, Query(description="Runs recorded before.")] = None,
) -> UsageReply:
    """Sums of what the caller's runs used (kept after a chat is deleted, until erasure)."""
    if chat_uuid is not None:
        await owned_chat(state, user, chat_uuid)
    usage = state.store.usage
    totals = await usage.totals(
        by=by, user_uuid=user, chat_uuid=chat_uuid, since=since, until=until
    )
    total = await usage.total(user_uuid=user, chat_uuid=chat_uuid, since=since, until=until)
    return UsageReply(by=by, totals=totals, total=total)


@router.get(
    "/runs",
    response_model=list[RunUsage],
    summary="My runs' usage, newest first",
    responses=_NOT_FOUND,
)
async def usage_runs(
    state: AppState,
    user: CurrentUser,
    chat_uuid: Annotated[UUID | None, Query(description="Only this chat of mine.")] = None,
    limit: Annotated[int, Query(ge=1, le=USAGE_ROWS_PAGE)] = 100,
) -> list[RunUsage]:
    """The ledger's rows of the caller's runs (of one chat), newest first."""
    if chat_uuid is not None:
        await owned_chat(state, user, chat_uuid)
    return await state.store.usage.runs(user_uuid=user, chat_uuid=chat_uuid, limit=limit)


@router.get("/budgets", response_model=list[ScopedBudget], summary="My budgets")
async def list_budgets(state: AppState, user: CurrentUser) -> list[ScopedBudget]:
    """The caller's own budget and their chats' budgets."""
    return await state.store.usage.budgets(user)


@router.put(
    "/budget",
    response_model=ScopedBudget,
    summary="Set my budget, or one chat's",
    responses=_NOT_FOUND,
)
async def set_budget(state: AppState, user: CurrentUser, body: BudgetRequest) -> ScopedBudget:
    """Replace the budget: a run starts only while what was used is below each limit."""
    budget = Budget(max_cost_usd=body.max_cost_usd, max_tokens=body.max_tokens, period=body.period)
    if body.chat_uuid is None:
        return await state.store.usage.set_budget(budget, user_uuid=user)
    await owned_chat(state, user, body.chat_uuid)
    return await state.store.usage.set_budget(budget, chat_uuid=body.chat_uuid)


@router.delete(
    "/budget",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Remove my budget, or one chat's",
    responses={404: {"description": "No such chat of mine, or no budget set."}},
)
async def clear_budget(
    state: AppState,
    user: CurrentUser,
    chat_uuid: Annotated[UUID | None, Query(description="One chat's budget instead.")] = None,
) -> Response:
    """Remove the budget; 404 when there was none."""
    if chat_uuid is not None:
        await owned_chat(state, user, chat_uuid)
        cleared = await state.store.usage.clear_budget(chat_uuid=chat_uuid)
    else:
        cleared = await state.store.usage.clear_budget(user_uuid=user)
    if not cleared:
        raise HTTPException(404, detail="no budget is set there")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
