"""``threadstore chats``: list, show, rename, delete and compact chats."""

from __future__ import annotations

import json
from typing import Annotated, Any
from uuid import UUID

import typer
from rich.markup import escape
from rich.table import Table

from threadstore.cli._common import (
    DEFAULT_DB,
    ChatArgument,
    DbOption,
    UserOption,
    YesOption,
    chats_app,
    check_store,
    fail,
    out,
    resolve_chat,
    shorten,
    user_of,
    when,
    with_store,
)
from threadstore.errors import InvalidInputError
from threadstore.models import (
    Chat,
    Message,
    Summary,
)
from threadstore.store import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    Store,
)


@chats_app.command("list")
def chats_list(
    db: DbOption = DEFAULT_DB,
    user: UserOption = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many chats to show.")] = 20,
    cursor: Annotated[
        str | None, typer.Option(help="Continue after a previous page (its next_cursor).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    search: Annotated[
        str | None, typer.Option(help="Only chats whose name contains TEXT, ignoring case.")
    ] = None,
) -> None:
    """List chats, newest activity first, with each chat's last message (a page at a time)."""
    check_store(db)
    user_uuid = user_of(user)

    async def work(store: Store) -> tuple[list[Chat], dict[UUID, Message], str | None]:
        # Without --user: every user's chats, still one page at a time.
        page = await store.chats.list_chats(
            user_uuid, limit=limit, cursor=cursor, name_contains=search
        )
        chats, next_cursor = page.items, page.next_cursor
        last = await store.get_last_messages([c.chat_uuid for c in chats])
        return chats, last, next_cursor

    chats, last, next_cursor = with_store(db, work)
    if as_json:
        items = [
            {
                **c.model_dump(mode="json"),
                "last_message": last[c.chat_uuid].model_dump(mode="json")
                if c.chat_uuid in last
                else None,
            }
            for c in chats
        ]
        print(json.dumps({"items": items, "next_cursor": next_cursor}, indent=2))
        return
    if not chats:
        out.print("no chats yet")
        return
    table = Table(box=None, pad_edge=False)
    table.add_column("chat", no_wrap=True)
    if user_uuid is None:
        table.add_column("user", no_wrap=True)
    table.add_column("name / thread", overflow="fold", max_width=30)
    table.add_column("updated", no_wrap=True)
    table.add_column("last message", overflow="fold")
    for chat in chats:
        message = last.get(chat.chat_uuid)
        preview = f"{message.role}: {shorten(message.content, 48)}" if message else "(empty)"
        cells = [str(chat.chat_uuid)[:8], escape(chat.name or chat.thread_id), when(chat)]
        if user_uuid is None:
            cells.insert(1, str(chat.user_uuid)[:8])
        table.add_row(*cells, escape(preview))
    out.print(table)
    if next_cursor:
        out.print(f"[dim]more: --cursor {next_cursor}[/]", soft_wrap=True)


@chats_app.command("show")
def chats_show(
    chat: ChatArgument,
    db: DbOption = DEFAULT_DB,
    user: UserOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the chat's export document (all of it).")
    ] = False,
    last: Annotated[
        int, typer.Option(min=1, max=MAX_PAGE_SIZE, help="How many of the newest messages.")
    ] = DEFAULT_PAGE_SIZE,
) -> None:
    """Show a chat's newest messages (--last), with tool calls and reasoning, oldest first."""
    from threadstore.transfer import export_chat

    check_store(db)

    async def work(store: Store) -> tuple[Chat, list[Message], bool, str | None]:
        found = await resolve_chat(store, chat, user_of(user))
        if as_json:
            return found, [], False, (await export_chat(store, found)).model_dump_json(indent=2)
        # One page from the end, and one row before it: whether there is more.
        page = list(await store.get_chat_messages(found.chat_uuid, before=2**62, limit=last))
        earlier = bool(page) and bool(
            await store.get_chat_messages(found.chat_uuid, before=page[0].seq, limit=1)
        )
        summaries.extend(await store.branches.summaries(found.chat_uuid))
        return found, page, earlier, None

    summaries: list[Summary] = []
    found, messages, earlier, exported = with_store(db, work)
    if exported is not None:
        print(exported)
        return
    out.print(f"[bold]{escape(found.name or found.thread_id)}[/]")
    out.print(
        f"[dim]chat {found.chat_uuid} · thread {escape(found.thread_id)} · "
        f"user {found.user_uuid} · updated {when(found)}[/]"
    )
    if found.state not in (None, {}):
        out.print(f"[dim]state {escape(json.dumps(found.state)[:200])}[/]")
    if earlier:
        out.print(f"[dim]earlier messages not shown: --last {MAX_PAGE_SIZE} or --json[/]")
    ends = {summary.last_message_uuid: summary for summary in reversed(summaries)}
    for message in messages:
        _print_message(message)
        if message.message_uuid in ends:
            summary = ends[message.message_uuid]
            out.print(
                f"\n[bold yellow]── summary {str(summary.summary_uuid)[:8]}[/] [dim]the agent gets"
                f" this instead of the {summary.message_count} message(s) up to here[/]",
                soft_wrap=True,
            )
            out.print(f"[yellow]{escape(shorten(summary.content, 400))}[/]")


_ROLE_STYLE = {"user": "bold green", "assistant": "bold cyan", "tool": "bold magenta"}


def _print_message(message: Message) -> None:
    status = "" if message.status == "complete" else f" [yellow]({message.status})[/]"
    style = _ROLE_STYLE.get(message.role, "bold")
    out.print(f"\n[{style}]{message.role}[/]{status}")
    if message.role not in ("assistant", "reasoning", "activity"):
        if message.content:
            out.print(escape(message.content))
        return
    from threadstore.chat import ui_from_messages

    # The message's parts in the order they streamed: a tool card sits between the
    # sentences around it; reasoning, data (CUSTOM events, activities) and citations
    # are one line each.
    for ui in ui_from_messages([message], str):
        calls = {call.tool_call_id: call for call in ui.tool_calls or ()}
        for part in ui.parts or ():
            if part.type == "text":
                out.print(escape(part.text))
            elif part.type == "reasoning" and not part.encrypted:
                out.print(f"  [dim italic]thinking: {escape(shorten(part.text, 200))}[/]")
            elif part.type == "tool" and part.tool_call_id in calls:
                call = calls[part.tool_call_id]
                arguments = escape(shorten(call.arguments, 120))
                out.print(f"  [magenta]→ {escape(call.tool_name)}({arguments})[/]")
                if call.output is not None:
                    result = (
                        call.output if isinstance(call.output, str) else json.dumps(call.output)
                    )
                    out.print(f"  [magenta]← {escape(shorten(result, 200))}[/]")
            elif part.type == "data":
                payload = shorten(json.dumps(part.payload, ensure_ascii=False, default=str), 200)
                out.print(f"  [blue]◆ {escape(part.name)}: {escape(payload)}[/]")
            elif part.type == "citation":
                cited = shorten(json.dumps(part.citation, ensure_ascii=False, default=str), 200)
                out.print(f"  [dim]cites {escape(cited)}[/]")


@chats_app.command("rename")
def chats_rename(
    chat: ChatArgument,
    name: Annotated[str, typer.Argument(help="The new name.")],
    db: DbOption = DEFAULT_DB,
    user: UserOption = None,
) -> None:
    """Rename a chat (at most 200 characters, as through the server)."""
    from threadstore.server import DEFAULT_LIMITS, check_name

    check_store(db)
    try:
        new_name = check_name(name, DEFAULT_LIMITS)
    except InvalidInputError as exc:
        fail(str(exc))

    async def work(store: Store) -> Chat | None:
        found = await resolve_chat(store, chat, user_of(user))
        return await store.update_chat_name(found.chat_uuid, new_name)

    renamed = with_store(db, work)
    if renamed is None:
        fail(f"chat {chat!r} was deleted meanwhile")
    out.print(f"[green]✓[/] renamed {renamed.chat_uuid} to {escape(renamed.name or '')!r}")


@chats_app.command("delete")
def chats_delete(
    chat: ChatArgument,
    db: DbOption = DEFAULT_DB,
    user: UserOption = None,
    yes: YesOption = False,
) -> None:
    """Delete a chat and all its messages, for good."""
    check_store(db)

    found = with_store(db, lambda store: resolve_chat(store, chat, user_of(user)))
    label = found.name or found.thread_id
    if not yes and not typer.confirm(f"Delete chat {found.chat_uuid} ({label}) for good?"):
        raise typer.Exit(1)

    with_store(db, lambda store: store.delete_chat(found.chat_uuid))
    out.print(f"[green]✓[/] deleted {found.chat_uuid}")


@chats_app.command("compact")
def chats_compact(
    chat: ChatArgument,
    db: DbOption = DEFAULT_DB,
    user: UserOption = None,
    keep: Annotated[int, typer.Option(min=0, help="Newest messages kept out of the summary.")] = 20,
    summarizer: Annotated[
        str | None,
        typer.Option(
            help="module:attribute of a summarizer(messages, previous) -> str (sync or "
            "async). Default: the deterministic one.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Summarize a chat's older messages for its agent; every message stays stored and shown."""
    from threadstore.lifecycle import deterministic_summary

    check_store(db)
    chosen = deterministic_summary if summarizer is None else _load_summarizer(summarizer)

    async def work(store: Store) -> Summary | None:
        found = await resolve_chat(store, chat, user_of(user))
        return await store.branches.compact(found.chat_uuid, chosen, keep_messages=keep)

    made = with_store(db, work)
    if made is None:
        out.print(
            f"nothing to compact: fewer than {keep} message(s) past the last summary",
            soft_wrap=True,
        )
        return
    out.print(
        f"[green]✓[/] summary {made.summary_uuid}: the agent gets it instead of"
        f" {made.message_count} message(s); undo with: threadstore chats uncompact {chat}",
        soft_wrap=True,
    )


@chats_app.command("uncompact")
def chats_uncompact(
    chat: ChatArgument,
    db: DbOption = DEFAULT_DB,
    user: UserOption = None,
    summary: Annotated[
        str | None,
        typer.Option(help="The summary's uuid (default: the chat's newest).", show_default=False),
    ] = None,
) -> None:
    """Remove a chat's summary: its agent gets the messages it covered again."""
    check_store(db)

    async def work(store: Store) -> UUID | None:
        found = await resolve_chat(store, chat, user_of(user))
        summaries = await store.branches.summaries(found.chat_uuid)
        chosen = [s for s in summaries if summary is None or str(s.summary_uuid) == summary]
        if not chosen:
            return None
        await store.branches.remove_summary(found.chat_uuid, chosen[0].summary_uuid)
        return chosen[0].summary_uuid

    removed = with_store(db, work)
    if removed is None:
        fail(
            f"chat {chat!r} has no summary {summary or ''}".rstrip(), "see: threadstore chats show"
        )
    out.print(f"[green]✓[/] removed summary {removed}")


def _load_summarizer(spec: str) -> Any:
    """The object ``module:attribute`` names (a summarizer)."""
    import importlib

    module, _, attribute = spec.partition(":")
    if not module or not attribute:
        fail(f"--summarizer {spec!r} is not module:attribute")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        fail(f"cannot load the summarizer {spec!r}: {exc}")
