"""``threadstore search``: find a user's messages by the words they hold."""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from threadstore.cli._common import (
    DEFAULT_DB,
    DbOption,
    app,
    check_store,
    out,
    user_of,
    with_store,
)
from threadstore.models import SearchHit


@app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="Plain words; a message matches when it holds all.")],
    db: DbOption = DEFAULT_DB,
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            help="Whose messages: a UUID or a user id (mapped like the server maps it)."
            " Default: the server's local user (its --auth none).",
        ),
    ] = None,
    all_branches: Annotated[
        bool, typer.Option("--all-branches", help="Also the branches a chat moved away from.")
    ] = False,
    best: Annotated[bool, typer.Option("--best", help="Best match first (not newest).")] = False,
    limit: Annotated[int, typer.Option(min=1, max=100, help="How many hits to show.")] = 20,
    cursor: Annotated[
        str | None, typer.Option(help="Continue after a previous page (its next_cursor).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Search one user's messages (text, tool calls, reasoning), newest first, with snippets."""
    from threadstore.server import LOCAL_USER_UUID

    check_store(db)
    user_uuid: UUID = user_of(user) or LOCAL_USER_UUID
    order: Literal["newest", "best"] = "best" if best else "newest"

    page = with_store(
        db,
        lambda store: store.search(
            user_uuid, query, order=order, all_branches=all_branches, limit=limit, cursor=cursor
        ),
    )
    if as_json:
        print(page.model_dump_json(indent=2))
        return
    if not page.items:
        out.print("no message has those words")
        return
    table = Table(box=None, pad_edge=False)
    table.add_column("chat", no_wrap=True)
    table.add_column("name / thread", overflow="fold", max_width=24)
    table.add_column("when", no_wrap=True)
    table.add_column("what", no_wrap=True)
    table.add_column("snippet", overflow="fold")
    for hit in page.items:
        table.add_row(
            str(hit.chat_uuid)[:8],
            escape(hit.chat_name or hit.thread_id),
            hit.created_at.strftime("%Y-%m-%d %H:%M"),
            f"{hit.role} {hit.kind}",
            _marked(hit),
        )
    out.print(table)
    if page.next_cursor:
        out.print(f"[dim]more: --cursor {page.next_cursor}[/]", soft_wrap=True)


def _marked(hit: SearchHit) -> Text:
    """The snippet with its matching words in bold (as text: never read as markup)."""
    text = Text(hit.snippet)
    for start, end in hit.highlights:
        text.stylize("bold yellow", start, end)
    return text
