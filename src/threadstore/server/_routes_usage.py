"""The usage ledger over HTTP: the caller's totals and runs, and the budgets they set.

Everything is the caller's own: totals and runs of their chats, budgets of theirs or
of one of their chats (another user's chat answers 404 like one that does not exist).
A run whose user's or chat's budget is spent is refused by ``POST /agui`` with a 402,
code ``budget_exceeded``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, HTTPException, Query, Response, status
from pydantic import BaseModel, Field

from threadstore.server._deps import CHAT_NOT_FOUND, AppState, CurrentUser, ServerState, owned_chat
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


async def _own_chat(state: ServerState, user: UUID, chat_uuid: UUID | None) -> None:
    """404 unless the chat, when one is named, is the caller's."""
    if chat_uuid is not None:
        await owned_chat(state, user, chat_uuid)


def _scope(user: UUID, chat_uuid: UUID | None) -> dict[str, UUID]:
    """Whose budget: the named chat's, else the caller's own."""
    return {"user_uuid": user} if chat_uuid is None else {"chat_uuid": chat_uuid}


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
    summary="My usage: tokens and cost per chat, per day, or in all",
    responses=CHAT_NOT_FOUND,
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
    await _own_chat(state, user, chat_uuid)
    usage = state.store.usage
    totals = await usage.totals(
        by=by, user_uuid=user, chat_uuid=chat_uuid, since=since, until=until
    )
    total = await usage.total(user_uuid=user, chat_uuid=chat_uuid, since=since, until=until)
    return UsageReply(by=by, totals=totals, total=total)


@router.get(
    "/runs",
    summary="My runs' usage, newest first",
    responses=CHAT_NOT_FOUND,
)
async def usage_runs(
    state: AppState,
    user: CurrentUser,
    chat_uuid: Annotated[UUID | None, Query(description="Only this chat of mine.")] = None,
    limit: Annotated[int, Query(ge=1, le=USAGE_ROWS_PAGE)] = 100,
) -> list[RunUsage]:
    """The ledger's rows of the caller's runs (of one chat), newest first."""
    await _own_chat(state, user, chat_uuid)
    return await state.store.usage.runs(user_uuid=user, chat_uuid=chat_uuid, limit=limit)


@router.get("/budgets", summary="My budgets")
async def list_budgets(state: AppState, user: CurrentUser) -> list[ScopedBudget]:
    """The caller's own budget and their chats' budgets."""
    return await state.store.usage.budgets(user)


@router.put(
    "/budget",
    summary="Set my budget, or one chat's",
    responses=CHAT_NOT_FOUND,
)
async def set_budget(state: AppState, user: CurrentUser, body: BudgetRequest) -> ScopedBudget:
    """Replace the budget: a run starts only while what was used is below each limit."""
    budget = Budget(max_cost_usd=body.max_cost_usd, max_tokens=body.max_tokens, period=body.period)
    await _own_chat(state, user, body.chat_uuid)
    return await state.store.usage.set_budget(budget, **_scope(user, body.chat_uuid))


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
    await _own_chat(state, user, chat_uuid)
    if not await state.store.usage.clear_budget(**_scope(user, chat_uuid)):
        raise HTTPException(404, detail="no budget is set there")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
