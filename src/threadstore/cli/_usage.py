"""``threadstore usage``: what runs used (tokens, cost) and the budgets that stop runs."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Literal, TypeVar
from uuid import UUID

import typer
from pydantic import BaseModel
from rich.markup import escape
from rich.table import Table

from threadstore.cli._common import (
    DEFAULT_DB,
    AsJson,
    DbOption,
    ScopeChat,
    ScopeUser,
    check_store,
    command_group,
    fail,
    out,
    resolve_chat,
    scope_label,
    scope_of,
    user_of,
    with_store,
)
from threadstore.keys import user_uuid_for
from threadstore.store import Store
from threadstore.usage import USAGE_ROWS_PAGE, Budget, RunUsage, ScopedBudget, UsageTotals

usage_app = command_group(
    "usage", "The usage ledger: tokens and cost per run, chat, user and day; budgets."
)

_Row = TypeVar("_Row", bound=BaseModel)


async def _chat_uuid(store: Store, chat: str | None) -> UUID | None:
    return None if chat is None else (await resolve_chat(store, chat, None)).chat_uuid


def _since(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        fail(f"--since {text!r} is not a date", "use 2026-12-01 or 2026-12-01T08:00+00:00")


def _print_rows(
    rows: Sequence[_Row],
    as_json: bool,
    empty: str,
    columns: tuple[str, ...],
    cells: Callable[[_Row], list[str]],
) -> None:
    """The rows as a JSON list, or as a table of ``cells`` (``empty`` when there are none)."""
    if as_json:
        out.print_json(json.dumps([row.model_dump(mode="json") for row in rows]))
    elif not rows:
        out.print(f"[dim]{empty}[/]")
    else:
        table = Table(*columns)
        for row in rows:
            table.add_row(*cells(row))
        out.print(table)


@usage_app.command("show")
def usage_show(
    db: DbOption = DEFAULT_DB,
    user: ScopeUser = None,
    chat: ScopeChat = None,
    by: Annotated[
        str, typer.Option(help="Sum per chat, user or (UTC) day.", show_choices=True)
    ] = "chat",
    since: Annotated[str | None, typer.Option(help="Runs recorded at or after (ISO date).")] = None,
    as_json: AsJson = False,
) -> None:
    """Show tokens and cost summed per chat, user or day, and their total."""
    check_store(db)
    if by not in ("chat", "user", "day"):
        fail(f"--by must be chat, user or day, got {by!r}")
    grouping: Literal["chat", "user", "day"] = by  # type: ignore[assignment]
    start = _since(since)

    async def work(store: Store) -> tuple[list[UsageTotals], UsageTotals]:
        user_uuid, chat_uuid = user_of(user), await _chat_uuid(store, chat)
        totals = await store.usage.totals(
            by=grouping, user_uuid=user_uuid, chat_uuid=chat_uuid, since=start
        )
        total = await store.usage.total(user_uuid=user_uuid, chat_uuid=chat_uuid, since=start)
        return totals, total

    totals, total = with_store(db, work)
    if as_json:
        data = {
            "by": by,
            "totals": [t.model_dump(mode="json") for t in totals],
            "total": total.model_dump(mode="json"),
        }
        out.print_json(json.dumps(data))
        return
    if not totals:
        out.print("[dim]no usage recorded[/]")
        return
    table = Table(by, "runs", "input", "output", "cached", "cost USD", "saved USD")
    field = "day" if by == "day" else f"{by}_uuid"  # what the rows are summed by
    for row in [*totals, total]:
        key = "total" if row is total else str(getattr(row, field))
        table.add_row(
            key,
            str(row.runs),
            f"{row.input_tokens:,}",
            f"{row.output_tokens:,}",
            f"{row.cached_input_tokens:,}",
            f"{row.cost_usd:.6f}",
            f"{row.cache_savings_usd:.6f}",
            end_section=row is totals[-1],
        )
    out.print(table)


@usage_app.command("runs")
def usage_runs(
    db: DbOption = DEFAULT_DB,
    user: ScopeUser = None,
    chat: ScopeChat = None,
    limit: Annotated[int, typer.Option(min=1, max=USAGE_ROWS_PAGE, help="Runs listed.")] = 20,
    as_json: AsJson = False,
) -> None:
    """List the ledger's runs, newest first."""
    check_store(db)

    async def work(store: Store) -> list[RunUsage]:
        chat_uuid = await _chat_uuid(store, chat)
        return await store.usage.runs(user_uuid=user_of(user), chat_uuid=chat_uuid, limit=limit)

    def cells(row: RunUsage) -> list[str]:
        return [
            row.recorded_at.strftime("%Y-%m-%d %H:%M"),
            str(row.chat_uuid)[:8],
            escape(row.run_id),
            escape(row.model or ""),
            f"{row.input_tokens:,}",
            f"{row.output_tokens:,}",
            f"{row.cost_usd:.6f}",
        ]

    columns = ("recorded", "chat", "run", "model", "input", "output", "cost USD")
    _print_rows(with_store(db, work), as_json, "no usage recorded", columns, cells)


@usage_app.command("budget")
def usage_budget(
    db: DbOption = DEFAULT_DB,
    user: ScopeUser = None,
    chat: ScopeChat = None,
    max_cost: Annotated[
        float | None, typer.Option(min=0, help="Stop runs once this many USD are spent.")
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option(min=0, help="Stop runs once this many tokens are used.")
    ] = None,
    daily: Annotated[bool, typer.Option(help="Count today's (UTC) runs only.")] = False,
    clear: Annotated[bool, typer.Option(help="Remove the budget instead.")] = False,
) -> None:
    """Set (or --clear) the budget of a user (--user) or of one chat (--chat)."""
    check_store(db)
    if (user is None) == (chat is None):
        fail("a budget is for a user (--user) or a chat (--chat): pass one of them")
    if not clear and max_cost is None and max_tokens is None:
        fail("give --max-cost, --max-tokens or both (or --clear)")

    async def work(store: Store) -> bool:
        scope = await scope_of(store, user, chat)
        if clear:
            return await store.usage.clear_budget(**scope)
        period: Literal["total", "day"] = "day" if daily else "total"
        budget = Budget(max_cost_usd=max_cost, max_tokens=max_tokens, period=period)
        await store.usage.set_budget(budget, **scope)
        return True

    done = with_store(db, work)
    whom = escape(scope_label(user, chat))
    if clear:
        out.print(f"[green]✓[/] budget of {whom} removed" if done else f"no budget for {whom}")
    else:
        out.print(f"[green]✓[/] budget set for {whom}")


@usage_app.command("budgets")
def usage_budgets(
    user: Annotated[str, typer.Argument(help="The user (UUID or name).")],
    db: DbOption = DEFAULT_DB,
    as_json: AsJson = False,
) -> None:
    """List a user's budgets: their own and their chats'."""
    check_store(db)

    def cells(scoped: ScopedBudget) -> list[str]:
        limits = scoped.budget
        return [
            scoped.scope,
            str(scoped.scope_uuid),
            "" if limits.max_cost_usd is None else f"{limits.max_cost_usd:g}",
            "" if limits.max_tokens is None else f"{limits.max_tokens:,}",
            limits.period,
        ]

    columns = ("scope", "for", "max USD", "max tokens", "period")
    budgets = with_store(db, lambda store: store.usage.budgets(user_uuid_for(user)))
    _print_rows(budgets, as_json, "no budgets", columns, cells)
