"""The ``threadstore`` command: run the server, migrate, inspect and move chats.

Every command takes ``--db`` (or the ``THREADSTORE_DB`` variable); the default is
the SQLite file ``./threadstore.db``. ``serve`` migrates the database itself; the
other commands never change the schema and ask for ``threadstore migrate`` when
it is missing.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar
from uuid import UUID

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from threadstore.errors import ConflictError, MigrationError, ThreadstoreError
from threadstore.models import Chat, Message, utcnow
from threadstore.store import open_store
from threadstore.store.base import DEFAULT_DELETED_RETENTION, Store

__all__ = ["app", "main"]

DEFAULT_DB = "sqlite:///./threadstore.db"
T = TypeVar("T")

app = typer.Typer(
    name="threadstore",
    help="Durable, typed chat history for AI agents: an AG-UI server, and tools for its data.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)
chats_app = typer.Typer(help="List, show, rename and delete chats.", no_args_is_help=True)
app.add_typer(chats_app, name="chats")

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

DbOption = Annotated[
    str,
    typer.Option(
        "--db",
        envvar="THREADSTORE_DB",
        help="Store URL: sqlite:///path.db, postgresql://user@host/db or memory://.",
        show_default=True,
    ),
]
UserOption = Annotated[
    str | None,
    typer.Option(
        "--user",
        help="Only this user's chats: a UUID or a user id (mapped like the server maps it).",
    ),
]
ChatArgument = Annotated[
    str, typer.Argument(help="Chat UUID, a unique prefix of one, or a thread id.")
]


def _fail(message: str, hint: str | None = None) -> NoReturn:
    err.print(f"[bold red]error:[/] {escape(message)}")
    if hint:
        err.print(f"[dim]{escape(hint)}[/]")
    raise typer.Exit(1)


def _run(work: Callable[[], Coroutine[Any, Any, T]], db: str) -> T:
    try:
        return asyncio.run(work())
    except MigrationError as exc:
        _fail(str(exc), f"create or upgrade the schema with: threadstore migrate --db {db}")
    except ThreadstoreError as exc:
        _fail(str(exc))


def _check_sqlite_exists(db: str) -> None:
    if not db.startswith("sqlite://"):
        return
    from threadstore.store.sqlite import sqlite_path

    path = sqlite_path(db)
    if path != ":memory:" and not Path(path).exists():
        _fail(
            f"no database at {path}",
            f"start the server (threadstore serve --db {db}) or run: threadstore migrate --db {db}",
        )


@asynccontextmanager
async def _store(db: str) -> AsyncIterator[Store]:
    store = await open_store(db, setup=False)
    try:
        yield store
    finally:
        await store.close()


def _user(user: str | None) -> UUID | None:
    if user is None:
        return None
    from threadstore.server.auth import user_uuid_for

    return user_uuid_for(user)


async def _resolve_chat(store: Store, ref: str, user: UUID | None) -> Chat:
    try:
        chat = await store.get_chat(UUID(ref))
    except ValueError:
        chat = None
    if chat is not None and (user is None or chat.user_uuid == user):
        return chat
    candidates = [
        c
        for c in await store.get_all_chats(user)
        if str(c.chat_uuid).startswith(ref.lower()) or c.thread_id == ref
    ]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        _fail(f"no chat matches {ref!r}", "list chats with: threadstore chats list")
    names = ", ".join(f"{c.chat_uuid} ({c.thread_id})" for c in candidates[:5])
    _fail(f"{ref!r} matches {len(candidates)} chats: {names}", "use a longer prefix or --user")


def _short(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _when(chat: Chat) -> str:
    return chat.updated_at.astimezone().strftime("%Y-%m-%d %H:%M")


@contextmanager
def _progress(total: int | None, label: str) -> Iterator[Callable[[], None]]:
    """Show a progress bar on a terminal (stderr) for long work; yield an advance()."""
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )
    with progress:
        task = progress.add_task(label, total=total)
        yield lambda: progress.advance(task)


# --- serve / migrate / sweep ----------------------------------------------------------------


@app.command(
    epilog="Examples:  threadstore serve  ·  threadstore serve --agent openai --model gpt-4o-mini"
    "  ·  threadstore serve --auth tokens --tokens-file tokens.txt --host 0.0.0.0"
    "  ·  See docs/server.md for the routes."
)
def serve(
    db: DbOption = DEFAULT_DB,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    agent: Annotated[
        str,
        typer.Option(
            help="demo (offline, built in), openai (OPENAI_BASE_URL, OPENAI_API_KEY), "
            "or module:attribute naming your agent."
        ),
    ] = "demo",
    model: Annotated[
        str | None, typer.Option(help="Model for --agent openai (default: $OPENAI_MODEL).")
    ] = None,
    auth: Annotated[
        str,
        typer.Option(
            help="none: one local user. tokens: every request needs Authorization: Bearer "
            "<token> (tokens from --tokens-file or $THREADSTORE_TOKENS)."
        ),
    ] = "none",
    tokens_file: Annotated[
        Path | None, typer.Option(help="File of token=user_id lines, for --auth tokens.")
    ] = None,
    trust_user_header: Annotated[
        str | None,
        typer.Option(
            help="Behind an authenticating proxy: take the user id from this header "
            "(e.g. X-User-Id). Only use when clients cannot reach the server directly."
        ),
    ] = None,
    demo_delay: Annotated[
        float, typer.Option(help="Seconds between the demo agent's streamed chunks.")
    ] = 0.03,
    migrate: Annotated[bool, typer.Option(help="Create or upgrade the schema at start-up.")] = True,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Run the AG-UI server with its chat-history API (stop with Ctrl-C; history stays)."""
    import uvicorn

    from threadstore.server import create_app
    from threadstore.server.auth import Authenticator, HeaderAuth, TokenAuth

    authenticator: Authenticator | None = None
    try:
        if auth == "tokens":
            if trust_user_header:
                _fail("choose either --auth tokens or --trust-user-header, not both")
            authenticator = (
                TokenAuth.from_file(tokens_file) if tokens_file else TokenAuth.from_env()
            )
        elif auth != "none":
            _fail(f"--auth must be 'none' or 'tokens', got {auth!r}")
        elif trust_user_header:
            authenticator = HeaderAuth(trust_user_header)
        server_app = create_app(
            db,
            agent=agent,
            model=model,
            demo_delay=demo_delay,
            auth=authenticator,
            migrate=migrate,
        )
    except ThreadstoreError as exc:
        _fail(str(exc))
    base = f"http://{host}:{port}"
    try_it = (
        f"curl -N {base}/agui -H 'Content-Type: application/json' -d "
        """'{"threadId":"t1","runId":"r1","messages":[{"id":"m1","role":"user","""
        """"content":"What is 12 * 7 + 3?"}]}'"""
    )
    err.print(f"[bold]threadstore[/] serving the [cyan]{escape(agent)}[/] agent on {base}")
    for label, value in (("database", db), ("API docs", f"{base}/docs"), ("try", try_it)):
        err.print(f"  {label:<9} {escape(value)}", soft_wrap=True)
    uvicorn.run(server_app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5)


@app.command()
def migrate(db: DbOption = DEFAULT_DB) -> None:
    """Create the schema, or apply the migrations a newer threadstore needs."""

    async def work() -> None:
        store = await open_store(db, setup=True)
        await store.close()

    _run(work, db)
    out.print(f"[green]✓[/] {escape(db)} is up to date")


@app.command()
def sweep(
    db: DbOption = DEFAULT_DB,
    stale_after: Annotated[
        float, typer.Option(help="Seconds without a heartbeat after which a run is dead.")
    ] = 30.0,
    event_retention: Annotated[
        float,
        typer.Option(
            min=0, help="PostgreSQL: seconds the relayed events of ended runs are kept for resumes."
        ),
    ] = 300.0,
    deleted_retention: Annotated[
        float,
        typer.Option(min=0, help="Seconds a soft-deleted chat stays restorable (30 days)."),
    ] = DEFAULT_DELETED_RETENTION.total_seconds(),
) -> None:
    """Finalize runs left behind by a server that stopped (their records become interrupted).

    On PostgreSQL it also deletes the relayed events of runs that ended more than
    --event-retention seconds ago, as a running server does periodically. Chats
    soft-deleted more than --deleted-retention seconds ago are deleted for good.
    """
    from threadstore.agui.distributed import DistributedRunManager

    _check_sqlite_exists(db)

    def no_agent() -> Any:
        raise RuntimeError("sweep starts no runs")

    async def work() -> tuple[int, int]:
        async with _store(db) as store:
            manager = DistributedRunManager(no_agent, store=store, event_retention=event_retention)
            async with manager:
                swept = await manager.sweep(stale_after)
            cutoff = utcnow() - timedelta(seconds=deleted_retention)
            return swept, await store.purge_deleted_chats(older_than=cutoff)

    swept, purged = _run(work, db)
    out.print(f"[green]✓[/] finalized {swept} stale run(s)")
    out.print(f"[green]✓[/] purged {purged} soft-deleted chat(s)")


# --- chats ---------------------------------------------------------------------------------


@chats_app.command("list")
def chats_list(
    db: DbOption = DEFAULT_DB,
    user: UserOption = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many chats to show.")] = 20,
    cursor: Annotated[
        str | None, typer.Option(help="Continue after a previous page (needs --user).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    search: Annotated[
        str | None, typer.Option(help="Only chats whose name contains TEXT, ignoring case.")
    ] = None,
) -> None:
    """List chats, newest activity first, with each chat's last message."""
    _check_sqlite_exists(db)
    user_uuid = _user(user)
    if cursor is not None and user_uuid is None:
        _fail("--cursor needs --user")

    async def work() -> tuple[list[Chat], dict[UUID, Message], str | None]:
        async with _store(db) as store:
            if user_uuid is None:
                chats = list(await store.get_all_chats(name_contains=search))[:limit]
                next_cursor = None
            else:
                page = await store.list_chats(
                    user_uuid, limit=limit, cursor=cursor, name_contains=search
                )
                chats, next_cursor = page.items, page.next_cursor
            last = await store.get_last_messages([c.chat_uuid for c in chats])
            return chats, last, next_cursor

    chats, last, next_cursor = _run(work, db)
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
        preview = f"{message.role}: {_short(message.content, 48)}" if message else "(empty)"
        cells = [str(chat.chat_uuid)[:8], escape(chat.name or chat.thread_id), _when(chat)]
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
        bool, typer.Option("--json", help="Print the chat's export document.")
    ] = False,
) -> None:
    """Show a chat's history: messages, tool calls and reasoning, oldest first."""
    from threadstore.transfer import export_chat

    _check_sqlite_exists(db)

    async def work() -> Any:
        async with _store(db) as store:
            found = await _resolve_chat(store, chat, _user(user))
            return await export_chat(store, found)

    document = _run(work, db)
    if as_json:
        print(document.model_dump_json(indent=2))
        return
    found = document.chat
    out.print(f"[bold]{escape(found.name or found.thread_id)}[/]")
    out.print(
        f"[dim]chat {found.chat_uuid} · thread {escape(found.thread_id)} · "
        f"user {found.user_uuid} · updated {_when(found)}[/]"
    )
    if found.state not in (None, {}):
        out.print(f"[dim]state {escape(json.dumps(found.state)[:200])}[/]")
    for message in document.messages:
        _print_message(message)


_ROLE_STYLE = {"user": "bold green", "assistant": "bold cyan", "tool": "bold magenta"}


def _print_message(message: Message) -> None:
    status = "" if message.status == "complete" else f" [yellow]({message.status})[/]"
    style = _ROLE_STYLE.get(message.role, "bold")
    out.print(f"\n[{style}]{message.role}[/]{status}")
    for step in message.reasonings:
        out.print(f"  [dim italic]thinking: {escape(_short(step.content, 200))}[/]")
    if message.content:
        out.print(escape(message.content))
    for call in message.tool_calls:
        out.print(f"  [magenta]→ {escape(call.name)}({escape(_short(call.arguments, 120))})[/]")
        if call.content is not None:
            out.print(f"  [magenta]← {escape(_short(call.content, 200))}[/]")


@chats_app.command("rename")
def chats_rename(
    chat: ChatArgument,
    name: Annotated[str, typer.Argument(help="The new name.")],
    db: DbOption = DEFAULT_DB,
    user: UserOption = None,
) -> None:
    """Rename a chat."""
    _check_sqlite_exists(db)
    if not name.strip():
        _fail("the name must not be blank")

    async def work() -> Chat | None:
        async with _store(db) as store:
            found = await _resolve_chat(store, chat, _user(user))
            return await store.update_chat_name(found.chat_uuid, name.strip())

    renamed = _run(work, db)
    if renamed is None:
        _fail(f"chat {chat!r} was deleted meanwhile")
    out.print(f"[green]✓[/] renamed {renamed.chat_uuid} to {escape(renamed.name or '')!r}")


@chats_app.command("delete")
def chats_delete(
    chat: ChatArgument,
    db: DbOption = DEFAULT_DB,
    user: UserOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a chat and all its messages, for good."""
    _check_sqlite_exists(db)

    async def find() -> Chat:
        async with _store(db) as store:
            return await _resolve_chat(store, chat, _user(user))

    found = _run(find, db)
    label = found.name or found.thread_id
    if not yes and not typer.confirm(f"Delete chat {found.chat_uuid} ({label}) for good?"):
        raise typer.Exit(1)

    async def delete() -> None:
        async with _store(db) as store:
            await store.delete_chat(found.chat_uuid)

    _run(delete, db)
    out.print(f"[green]✓[/] deleted {found.chat_uuid}")


# --- export / import -------------------------------------------------------------------------


@app.command(
    "export",
    epilog="Examples:  threadstore export -o all.jsonl  ·  threadstore export --user bob > b.jsonl",
)
def export_chats(
    chats: Annotated[
        list[str] | None, typer.Argument(help="Chats to export (default: all, or --user's).")
    ] = None,
    db: DbOption = DEFAULT_DB,
    user: UserOption = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
) -> None:
    """Export chats as JSON lines: one chat, with its whole history, per line."""
    from threadstore.transfer import export_chat

    _check_sqlite_exists(db)
    user_uuid = _user(user)

    async def work() -> int:
        async with _store(db) as store:
            if chats:
                selected = [await _resolve_chat(store, ref, user_uuid) for ref in chats]
            else:
                selected = list(await store.get_all_chats(user_uuid))
            sink = output.open("w", encoding="utf-8") if output else sys.stdout
            try:
                with _progress(len(selected), "exporting") as advance:
                    for chat in selected:
                        document = await export_chat(store, chat)
                        sink.write(document.model_dump_json() + "\n")
                        advance()
            finally:
                if output:
                    sink.close()
            return len(selected)

    count = _run(work, db)
    err.print(f"[green]✓[/] exported {count} chat(s)" + (f" to {output}" if output else ""))


@app.command(
    "import",
    epilog="Examples:  threadstore import all.jsonl  ·  threadstore import a.jsonl --user bob",
)
def import_chats(
    source: Annotated[Path, typer.Argument(help="JSON-lines file made by export ('-': stdin).")],
    db: DbOption = DEFAULT_DB,
    user: UserOption = None,
    skip_existing: Annotated[
        bool,
        typer.Option(help="Skip a chat whose user already has its thread id (else stop)."),
    ] = True,
) -> None:
    """Import chats from JSON lines; each chat lands whole or not at all."""
    from pydantic import ValidationError

    from threadstore.transfer import ChatExport, import_chat

    _check_sqlite_exists(db)
    user_uuid = _user(user)
    if str(source) == "-":
        lines = sys.stdin.read().splitlines()
    else:
        try:
            lines = source.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            _fail(f"cannot read {source}: {exc}")
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]

    async def work() -> tuple[int, int]:
        imported = skipped = 0
        async with _store(db) as store:
            with _progress(len(numbered), "importing") as advance:
                for number, line in numbered:
                    try:
                        document = ChatExport.model_validate_json(line)
                    except ValidationError as exc:
                        _fail(f"line {number} is not a chat export: {exc.errors()[0]['msg']}")
                    owner = user_uuid or document.chat.user_uuid
                    try:
                        await import_chat(store, document, user_uuid=owner)
                        imported += 1
                    except ConflictError as exc:
                        if not skip_existing:
                            _fail(f"line {number}: {exc}")
                        skipped += 1
                    advance()
        return imported, skipped

    imported, skipped = _run(work, db)
    note = f", skipped {skipped} already present" if skipped else ""
    out.print(f"[green]✓[/] imported {imported} chat(s){note}")


def main() -> None:
    """Entry point of the ``threadstore`` command."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
