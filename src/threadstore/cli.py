"""The ``threadstore`` command: run the server, migrate, inspect and move chats.

Every command takes ``--db`` (or the ``THREADSTORE_DB`` variable); the default is
the SQLite file ``./threadstore.db``. ``serve`` migrates the database itself; the
other commands never change the schema and ask for ``threadstore migrate`` when
it is missing.
"""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import json
import os
import sqlite3
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar
from uuid import UUID

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from threadstore.errors import (
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    MigrationError,
    ThreadstoreError,
)
from threadstore.models import (
    Chat,
    ExpiredChat,
    Message,
    RetentionPolicy,
    ScopedPolicy,
    Summary,
    SweepReport,
    utcnow,
)
from threadstore.store import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    SWEEP_BATCH,
    Store,
    open_store,
)

if TYPE_CHECKING:
    from threadstore.server import Authenticator

__all__ = ["app", "main"]

DEFAULT_DB = "sqlite:///./threadstore.db"
CORS_ENV_VAR = "THREADSTORE_CORS_ORIGINS"
STORE_TIMEOUT_ENV_VAR = "THREADSTORE_STORE_TIMEOUT"
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


def _print_version(value: bool) -> None:
    if value:
        from threadstore import __version__

        print(f"threadstore {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Durable, typed chat history for AI agents: an AG-UI server, and tools for its data."""


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
MIN_PREFIX = 8
ChatArgument = Annotated[
    str,
    typer.Argument(
        help=f"Chat UUID, a unique prefix of one (at least {MIN_PREFIX} characters), or a "
        "thread id."
    ),
]


def _fail(message: str, hint: str | None = None) -> NoReturn:
    # soft_wrap: one error is one line, however narrow the terminal or pipe.
    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    if hint:
        err.print(f"[dim]{escape(hint)}[/]", soft_wrap=True)
    raise typer.Exit(1)


_DB_HINT = "check --db (or $THREADSTORE_DB): sqlite:///path.db, postgresql://user@host/db"


def _run(work: Callable[[], Coroutine[Any, Any, T]], db: str) -> T:
    try:
        return asyncio.run(work())
    except MigrationError as exc:
        _fail(str(exc), f"create or upgrade the schema with: threadstore migrate --db {db}")
    except ConfigurationError as exc:
        _fail(str(exc), _DB_HINT)
    except ThreadstoreError as exc:
        _fail(str(exc))
    except sqlite3.Error as exc:
        _fail(f"cannot use the SQLite database {db}: {exc}", _DB_HINT)


def _check_store(db: str, *, create: bool = False) -> None:
    """Check ``--db`` before anything else is printed, so a bad one is one error line.

    A command that reads needs the SQLite file to exist; one that creates it
    needs its folder. ``serve`` then also opens the store once (:func:`_probe_store`),
    so a database it cannot reach never gets as far as the "serving on" banner.
    """
    if db.startswith("sqlite://"):
        from threadstore.store.sqlite import sqlite_path

        try:
            path = sqlite_path(db)
        except ThreadstoreError as exc:
            _fail(str(exc), _DB_HINT)
        if path != ":memory:":
            folder = Path(path).parent
            if create and not folder.is_dir():
                _fail(f"the folder {folder} does not exist", "create it, or choose another --db")
            if not create and not Path(path).exists():
                _fail(
                    f"no database at {path}",
                    f"start the server (threadstore serve --db {db}) "
                    f"or run: threadstore migrate --db {db}",
                )


def _probe_store(db: str, *, create: bool) -> None:
    """Open (and with ``create``, migrate) the store once and close it again."""

    async def probe() -> None:
        store = await open_store(db, setup=create)
        await store.close()

    _run(probe, db)


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
    from threadstore.server import user_uuid_for

    return user_uuid_for(user)


async def _resolve_chat(store: Store, ref: str, user: UUID | None) -> Chat:
    try:
        chat = await store.chats.get_chat(UUID(ref))
    except ValueError:
        chat = None
    if chat is not None and (user is None or chat.user_uuid == user):
        return chat
    # A short prefix would match whichever chat happens to start that way: ask for
    # enough of the UUID to mean one chat (the list shows the first 8 characters).
    prefix = ref.lower() if len(ref) >= MIN_PREFIX else None
    candidates = [
        c
        for c in await store.get_all_chats(user)
        if c.thread_id == ref or (prefix is not None and str(c.chat_uuid).startswith(prefix))
    ]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        hint = "list chats with: threadstore chats list"
        if prefix is None:
            hint = f"a chat UUID prefix needs at least {MIN_PREFIX} characters; {hint}"
        _fail(f"no chat matches {ref!r}", hint)
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
    "  ·  threadstore serve --tokens-file tokens.txt --host 0.0.0.0"
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
        str | None,
        typer.Option(
            help="none: one local user. tokens: every request needs Authorization: Bearer "
            "<token> (tokens from --tokens-file or $THREADSTORE_TOKENS). Default: tokens "
            "when a tokens source is given, else none.",
            show_default=False,
        ),
    ] = None,
    tokens_file: Annotated[
        Path | None,
        typer.Option(help="File of token=user_id lines; turns on token auth."),
    ] = None,
    trust_user_header: Annotated[
        str | None,
        typer.Option(
            help="Behind an authenticating proxy: take the user id from this header "
            "(e.g. X-User-Id). Only use when clients cannot reach the server directly."
        ),
    ] = None,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            envvar=CORS_ENV_VAR,
            help="Let a browser front end on this origin call the server (repeatable; "
            f"${CORS_ENV_VAR} takes space-separated origins; '*' allows any). Off by default.",
            show_default=False,
        ),
    ] = None,
    admin: Annotated[
        list[str] | None,
        typer.Option(
            help="A user id that may page through every user's chats at "
            "GET /api/admin/chats (repeatable). Nobody by default.",
            show_default=False,
        ),
    ] = None,
    demo_delay: Annotated[
        float, typer.Option(help="Seconds between the demo agent's streamed chunks.")
    ] = 0.03,
    migrate: Annotated[bool, typer.Option(help="Create or upgrade the schema at start-up.")] = True,
    store_timeout: Annotated[
        float | None,
        typer.Option(
            envvar=STORE_TIMEOUT_ENV_VAR,
            min=0.001,
            help="Seconds a store call waits for the database before the API answers 503 "
            "(default: the --db URL's ?timeout=, else 5).",
            show_default=False,
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="Server processes sharing the port (uvicorn workers). More than one needs "
            "PostgreSQL, where every process resumes, cancels and connects to every run.",
        ),
    ] = 1,
    compact_after: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Compact a chat after a run once its agent would get more than N messages "
            "(a summary of the older ones, the deterministic summarizer). Off by default.",
            show_default=False,
        ),
    ] = None,
    compact_keep: Annotated[
        int, typer.Option(min=0, help="Newest messages a compaction keeps out of the summary.")
    ] = 20,
    retention_interval: Annotated[
        float | None,
        typer.Option(
            min=0.1,
            help="Apply the retention policies every N seconds in the background (small "
            "batches, a pause between them). Off by default: threadstore sweep applies them.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the AG-UI server with its chat-history API (stop with Ctrl-C; history stays)."""
    import uvicorn

    from threadstore.server import TOKENS_ENV_VAR

    if workers > 1 and not db.startswith(("postgresql://", "postgres://")):
        _fail(
            f"--workers {workers} needs PostgreSQL: on {db.partition(':')[0]} a run can only be"
            " resumed and cancelled by the process running it; use --workers 1 or a"
            " postgresql:// --db"
        )
    authenticator, auth_line = _authenticator(auth, tokens_file, trust_user_header)
    _check_store(db, create=migrate)
    _probe_store(db, create=migrate)
    options = {
        "db": db,
        "agent": agent,
        "model": model,
        "demo_delay": demo_delay,
        "auth": auth,
        "tokens_file": None if tokens_file is None else str(tokens_file),
        "trust_user_header": trust_user_header,
        "cors_origins": cors_origin or [],
        "admins": admin or [],
        "store_timeout": store_timeout,
        "compact_after": compact_after,
        "compact_keep": compact_keep,
        "retention_interval": retention_interval,
    }
    if compact_after is not None and compact_after <= compact_keep:
        _fail(
            f"--compact-after {compact_after} must be more than --compact-keep {compact_keep}:"
            " every compaction must leave the agent fewer messages"
        )
    try:
        # Built here even for workers, so a bad option is one error line before the
        # banner; each worker then builds its own app (its own store, manager and relay),
        # the schema migrated above, once.
        server_app = _serve_app(options, migrate=migrate)
    except ThreadstoreError as exc:
        _fail(str(exc))
    base = f"http://{host}:{port}"
    bearer = " -H 'Authorization: Bearer <token>'" if auth_line.startswith("tokens") else ""
    try_it = (
        f"curl -N {base}/agui -H 'Content-Type: application/json'{bearer} -d "
        """'{"threadId":"t1","runId":"r1","messages":[{"id":"m1","role":"user","""
        """"content":"What is 12 * 7 + 3?"}]}'"""
    )
    err.print(f"[bold]threadstore[/] serving the [cyan]{escape(agent)}[/] agent on {base}")
    lines = [("database", db), ("auth", auth_line)]
    if cors_origin:
        lines.append(("CORS", ", ".join(cors_origin)))
    if admin:
        lines.append(("admins", ", ".join(admin)))
    lines += [("web page", f"{base}/"), ("API docs", f"{base}/docs"), ("try", try_it)]
    for label, value in lines:
        err.print(f"  {label:<9} {escape(value)}", soft_wrap=True)
    if authenticator is None and not _is_loopback(host):
        err.print(
            f"[bold yellow]warning:[/] listening on {escape(host)} with no auth: anyone who can "
            "reach this port reads and writes every chat. Use --tokens-file (or "
            f"${TOKENS_ENV_VAR}) or --trust-user-header behind a proxy.",
            soft_wrap=True,
        )
    if workers == 1:
        _freeze_start_up()
        uvicorn.run(
            server_app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5
        )
        return
    err.print(f"  {'workers':<9} {workers} processes", soft_wrap=True)
    os.environ[_WORKER_OPTIONS_ENV] = json.dumps(options)
    uvicorn.run(
        "threadstore.cli:worker_app",
        factory=True,
        workers=workers,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=5,
    )


_WORKER_OPTIONS_ENV = "THREADSTORE_SERVE_OPTIONS"
"""How ``serve --workers N`` hands its options to the worker processes uvicorn starts."""


def _serve_app(options: dict[str, Any], *, migrate: bool) -> Any:
    """The app ``serve`` runs, built from its options (in the server or in each worker)."""
    from threadstore.server import create_app

    authenticator, _ = _authenticator(
        options["auth"],
        None if options["tokens_file"] is None else Path(options["tokens_file"]),
        options["trust_user_header"],
    )
    return create_app(
        options["db"],
        agent=options["agent"],
        model=options["model"],
        demo_delay=options["demo_delay"],
        auth=authenticator,
        migrate=migrate,
        cors_origins=options["cors_origins"],
        admins=options["admins"],
        store_timeout=options.get("store_timeout"),
        compaction=_compaction(options.get("compact_after"), options.get("compact_keep", 20)),
        retention_interval=options.get("retention_interval"),
    )


def _compaction(after: int | None, keep: int) -> Any:
    """The server's compaction policy from ``--compact-after`` and ``--compact-keep``."""
    from threadstore.lifecycle import CompactionPolicy

    return None if after is None else CompactionPolicy(max_messages=after, keep_messages=keep)


def worker_app() -> Any:
    """The app of one ``serve --workers N`` worker (uvicorn calls it in each process)."""
    app = _serve_app(json.loads(os.environ[_WORKER_OPTIONS_ENV]), migrate=False)
    _freeze_start_up()
    return app


def _freeze_start_up() -> None:
    """Leave what the server process holds before it serves out of every collection.

    The imported modules, their classes and functions and the app built from them
    live as long as the process, yet each full collection of the cyclic collector scans
    them all again (tens of thousands of objects; figures in docs/benchmarks.md).
    ``gc.freeze()`` moves them to a generation the collector never scans; only what
    exists at this point is moved, so the runs' objects are collected as before. A
    server built around ``create_app`` in an app of its own can do the same.
    """
    gc.collect()
    gc.freeze()


def _authenticator(
    auth: str | None, tokens_file: Path | None, trust_user_header: str | None
) -> tuple[Authenticator | None, str]:
    """Resolve the auth options to an authenticator and the banner's description of it.

    A tokens source alone turns token auth on: a server started with tokens must
    never be silently open.
    """
    from threadstore.server import TOKENS_ENV_VAR, HeaderAuth, TokenAuth

    tokens_env = bool(os.environ.get(TOKENS_ENV_VAR))
    if auth not in (None, "none", "tokens"):
        _fail(f"--auth must be 'none' or 'tokens', got {auth!r}")
    if auth == "none" and (tokens_file or tokens_env):
        source = "--tokens-file" if tokens_file else f"${TOKENS_ENV_VAR}"
        _fail(
            f"{source} gives API tokens but --auth none turns auth off",
            f"drop --auth none to require the tokens, or remove {source}",
        )
    mode = auth or ("tokens" if tokens_file or tokens_env else "none")
    try:
        if mode == "tokens":
            if trust_user_header:
                _fail("choose either token auth or --trust-user-header, not both")
            tokens = TokenAuth.from_file(tokens_file) if tokens_file else TokenAuth.from_env()
            source = str(tokens_file) if tokens_file else f"${TOKENS_ENV_VAR}"
            users = len(set(tokens.tokens.values()))
            return tokens, f"tokens ({users} user(s) from {source}; send Authorization: Bearer)"
    except ThreadstoreError as exc:
        _fail(str(exc))
    if trust_user_header:
        return HeaderAuth(trust_user_header), f"trusted proxy header {trust_user_header}"
    return None, "none (every request is the one local user)"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@app.command()
def migrate(db: DbOption = DEFAULT_DB) -> None:
    """Create the schema, or apply the migrations a newer threadstore needs."""
    _check_store(db, create=True)

    async def work() -> tuple[int | None, int | None]:
        store = await open_store(db, setup=False)
        try:
            before = await _schema_version(store)
            await store.setup()
            return before, await _schema_version(store)
        finally:
            await store.close()

    before, after = _run(work, db)
    if before is None or after is None:
        out.print(f"[green]✓[/] {escape(db)} is up to date")
    elif before == after:
        out.print(
            f"[green]✓[/] {escape(db)} is up to date: the schema was already current "
            f"(version {after}); nothing applied"
        )
    else:
        out.print(
            f"[green]✓[/] {escape(db)} is up to date: applied migrations {before + 1} to "
            f"{after} (schema version {after})"
        )


async def _schema_version(store: Store) -> int | None:
    """The store's applied schema version (0 before the first migration); None if it has none."""
    try:
        return await store.schema_version()
    except MigrationError:  # no migrations table yet
        return 0


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
    ] = Store.deleted_retention.total_seconds(),
    batch: Annotated[
        int, typer.Option(min=1, help="Expired chats deleted per transaction.")
    ] = SWEEP_BATCH,
) -> None:
    """Finalize runs left behind by a server that stopped, and apply the retention policies.

    On PostgreSQL it also deletes the relayed events of runs that ended more than
    --event-retention seconds ago, as a running server does periodically. Chats
    soft-deleted more than --deleted-retention seconds ago are deleted for good. Then
    the chats whose retention policy has passed (threadstore retention show) go, a few
    per transaction.
    """
    from threadstore.agui import DistributedRunManager

    _check_store(db)

    def no_agent() -> Any:
        raise RuntimeError("sweep starts no runs")

    async def work() -> tuple[int, int, SweepReport]:
        async with _store(db) as store:
            manager = DistributedRunManager(no_agent, store=store, event_retention=event_retention)
            async with manager:
                swept = await manager.sweep(stale_after)
            cutoff = utcnow() - timedelta(seconds=deleted_retention)
            purged = await store.chats.purge_deleted_chats(older_than=cutoff)
            store.deleted_retention = timedelta(seconds=deleted_retention)
            return swept, purged, await store.chats.sweep_expired(batch=batch)

    swept, purged, report = _run(work, db)
    out.print(f"[green]✓[/] finalized {swept} stale run(s)")
    out.print(f"[green]✓[/] purged {purged} soft-deleted chat(s)")
    reasons = ", ".join(f"{n} {why}" for why, n in sorted(report.reasons.items())) or "none"
    out.print(
        f"[green]✓[/] retention: deleted {report.chats} chat(s) ({reasons}),"
        f" {report.messages} message(s), {report.run_events} run event(s)",
        soft_wrap=True,
    )


# --- chats ---------------------------------------------------------------------------------


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
    _check_store(db)
    user_uuid = _user(user)

    async def work() -> tuple[list[Chat], dict[UUID, Message], str | None]:
        async with _store(db) as store:
            # Without --user: every user's chats, still one page at a time.
            page = await store.chats.list_chats(
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
        bool, typer.Option("--json", help="Print the chat's export document (all of it).")
    ] = False,
    last: Annotated[
        int, typer.Option(min=1, max=MAX_PAGE_SIZE, help="How many of the newest messages.")
    ] = DEFAULT_PAGE_SIZE,
) -> None:
    """Show a chat's newest messages (--last), with tool calls and reasoning, oldest first."""
    from threadstore.transfer import export_chat

    _check_store(db)

    async def work() -> tuple[Chat, list[Message], bool, str | None]:
        async with _store(db) as store:
            found = await _resolve_chat(store, chat, _user(user))
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
    found, messages, earlier, exported = _run(work, db)
    if exported is not None:
        print(exported)
        return
    out.print(f"[bold]{escape(found.name or found.thread_id)}[/]")
    out.print(
        f"[dim]chat {found.chat_uuid} · thread {escape(found.thread_id)} · "
        f"user {found.user_uuid} · updated {_when(found)}[/]"
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
            out.print(f"[yellow]{escape(_short(summary.content, 400))}[/]")


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
                out.print(f"  [dim italic]thinking: {escape(_short(part.text, 200))}[/]")
            elif part.type == "tool" and part.tool_call_id in calls:
                call = calls[part.tool_call_id]
                arguments = escape(_short(call.arguments, 120))
                out.print(f"  [magenta]→ {escape(call.tool_name)}({arguments})[/]")
                if call.output is not None:
                    result = (
                        call.output if isinstance(call.output, str) else json.dumps(call.output)
                    )
                    out.print(f"  [magenta]← {escape(_short(result, 200))}[/]")
            elif part.type == "data":
                payload = _short(json.dumps(part.payload, ensure_ascii=False, default=str), 200)
                out.print(f"  [blue]◆ {escape(part.name)}: {escape(payload)}[/]")
            elif part.type == "citation":
                cited = _short(json.dumps(part.citation, ensure_ascii=False, default=str), 200)
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

    _check_store(db)
    try:
        new_name = check_name(name, DEFAULT_LIMITS)
    except InvalidInputError as exc:
        _fail(str(exc))

    async def work() -> Chat | None:
        async with _store(db) as store:
            found = await _resolve_chat(store, chat, _user(user))
            return await store.update_chat_name(found.chat_uuid, new_name)

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
    _check_store(db)

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

    _check_store(db)
    chosen = deterministic_summary if summarizer is None else _load_summarizer(summarizer)

    async def work() -> Summary | None:
        async with _store(db) as store:
            found = await _resolve_chat(store, chat, _user(user))
            return await store.branches.compact(found.chat_uuid, chosen, keep_messages=keep)

    made = _run(work, db)
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
    _check_store(db)

    async def work() -> UUID | None:
        async with _store(db) as store:
            found = await _resolve_chat(store, chat, _user(user))
            summaries = await store.branches.summaries(found.chat_uuid)
            chosen = [s for s in summaries if summary is None or str(s.summary_uuid) == summary]
            if not chosen:
                return None
            await store.branches.remove_summary(found.chat_uuid, chosen[0].summary_uuid)
            return chosen[0].summary_uuid

    removed = _run(work, db)
    if removed is None:
        _fail(
            f"chat {chat!r} has no summary {summary or ''}".rstrip(), "see: threadstore chats show"
        )
    out.print(f"[green]✓[/] removed summary {removed}")


def _load_summarizer(spec: str) -> Any:
    """The object ``module:attribute`` names (a summarizer)."""
    import importlib

    module, _, attribute = spec.partition(":")
    if not module or not attribute:
        _fail(f"--summarizer {spec!r} is not module:attribute")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        _fail(f"cannot load the summarizer {spec!r}: {exc}")


# --- retention -----------------------------------------------------------------------------------

retention_app = typer.Typer(
    help="Retention policies: how long chats are kept, and what a sweep would delete.",
    no_args_is_help=True,
)
app.add_typer(retention_app, name="retention")

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _seconds(text: str | None, option: str) -> float | None:
    """A duration given as seconds or with a unit (90s, 15m, 12h, 30d); ``None`` stays."""
    if text is None:
        return None
    number, unit = (text[:-1], text[-1]) if text and text[-1] in _UNITS else (text, "s")
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        _fail(f"{option} {text!r} is not a duration", "use seconds or 90s, 15m, 12h, 30d")
    if not value > 0:
        _fail(f"{option} must be more than 0, got {text!r}")
    return value


ScopeUser = Annotated[
    str | None, typer.Option("--user", help="For this user's chats.", show_default=False)
]
ScopeChat = Annotated[
    str | None,
    typer.Option("--chat", help="For this chat (UUID, prefix or thread id).", show_default=False),
]


async def _scope_of(store: Store, user: str | None, chat: str | None) -> dict[str, UUID | None]:
    if user is not None and chat is not None:
        _fail("pass --user or --chat, not both")
    if chat is not None:
        return {"chat_uuid": (await _resolve_chat(store, chat, None)).chat_uuid}
    return {"user_uuid": _user(user)}


def _scope_label(user: str | None, chat: str | None) -> str:
    return f"chat {chat}" if chat else f"user {user}" if user else "every chat"


@retention_app.command("set")
def retention_set(
    db: DbOption = DEFAULT_DB,
    user: ScopeUser = None,
    chat: ScopeChat = None,
    idle_ttl: Annotated[
        str | None, typer.Option(help="Delete chats idle this long (30d, 12h, seconds).")
    ] = None,
    absolute_ttl: Annotated[
        str | None, typer.Option(help="Delete chats this long after they were created.")
    ] = None,
    keep_run_logs: Annotated[
        int | None, typer.Option(min=0, help="Relayed event logs kept: the newest N runs'.")
    ] = None,
    deleted_window: Annotated[
        str | None, typer.Option(help="How long a soft-deleted chat stays restorable.")
    ] = None,
) -> None:
    """Set the retention policy of every chat, a user's (--user) or one chat's (--chat).

    Fields left out inherit (a chat's from its user's, a user's from the global policy);
    the policy replaces the one the scope had. A legal hold is kept as it was.
    """
    _check_store(db)
    fields = {
        "idle_ttl": _seconds(idle_ttl, "--idle-ttl"),
        "absolute_ttl": _seconds(absolute_ttl, "--absolute-ttl"),
        "keep_run_logs": keep_run_logs,
        "deleted_window": _seconds(deleted_window, "--deleted-window"),
    }

    async def work() -> None:
        async with _store(db) as store:
            scope = await _scope_of(store, user, chat)
            held = any(
                p.policy.legal_hold
                for p in await store.chats.retention_policies()
                if p.scope_uuid == (scope.get("chat_uuid") or scope.get("user_uuid"))
            )
            policy = RetentionPolicy(**fields, legal_hold=held)
            await store.chats.set_retention_policy(policy, **scope)

    _run(work, db)
    out.print(f"[green]✓[/] retention policy set for {escape(_scope_label(user, chat))}")


def _hold(db: str, user: str | None, chat: str | None, hold: bool) -> None:
    _check_store(db)
    if user is None and chat is None:
        _fail("a legal hold is for a user (--user) or a chat (--chat)")

    async def work() -> None:
        async with _store(db) as store:
            scope = await _scope_of(store, user, chat)
            key = scope.get("chat_uuid") or scope.get("user_uuid")
            current = next(
                (p.policy for p in await store.chats.retention_policies() if p.scope_uuid == key),
                RetentionPolicy(),
            )
            updated = current.model_copy(update={"legal_hold": hold})
            await store.chats.set_retention_policy(updated, **scope)

    _run(work, db)
    what = "placed on" if hold else "released from"
    out.print(f"[green]✓[/] legal hold {what} {escape(_scope_label(user, chat))}")


@retention_app.command("hold")
def retention_hold(
    db: DbOption = DEFAULT_DB, user: ScopeUser = None, chat: ScopeChat = None
) -> None:
    """Place a legal hold: nothing of the user (or the chat) expires until it is released."""
    _hold(db, user, chat, True)


@retention_app.command("release")
def retention_release(
    db: DbOption = DEFAULT_DB, user: ScopeUser = None, chat: ScopeChat = None
) -> None:
    """Release a legal hold."""
    _hold(db, user, chat, False)


@retention_app.command("show")
def retention_show(
    db: DbOption = DEFAULT_DB,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    limit: Annotated[int, typer.Option(min=0, help="Expired chats listed.")] = 20,
) -> None:
    """Show the policies, and what a sweep would delete now (nothing is deleted)."""
    _check_store(db)

    async def work() -> tuple[list[ScopedPolicy], list[ExpiredChat]]:
        async with _store(db) as store:
            return await store.chats.retention_policies(), await store.chats.expired_chats()

    policies, expired = _run(work, db)
    if as_json:
        print(
            json.dumps(
                {
                    "policies": [p.model_dump(mode="json") for p in policies],
                    "expired": [e.model_dump(mode="json") for e in expired],
                },
                indent=2,
            )
        )
        return
    if not policies:
        out.print("no retention policies: nothing expires (soft deletes are purged by sweep)")
    for scoped in policies:
        fields = scoped.policy.model_dump(exclude_none=True, exclude_defaults=True)
        who = "every chat" if scoped.scope == "global" else f"{scoped.scope} {scoped.scope_uuid}"
        out.print(f"{escape(who)}: {escape(json.dumps(fields)) if fields else '(inherits)'}")
    reasons: dict[str, int] = {}
    for item in expired:
        reasons[item.reason] = reasons.get(item.reason, 0) + 1
    summary = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items())) or "nothing"
    out.print(f"a sweep would delete {len(expired)} chat(s) now: {summary}", soft_wrap=True)
    for item in expired[:limit]:
        out.print(f"  {item.chat_uuid}  user {item.user_uuid}  {item.reason}", soft_wrap=True)


# --- erasure -----------------------------------------------------------------------------------


@app.command(epilog="Example:  threadstore forget bob --yes --by admin@example.com")
def forget(
    user: Annotated[
        str, typer.Argument(help="The user id (as the server's auth names it) or UUID.")
    ],
    db: DbOption = DEFAULT_DB,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    by: Annotated[
        str | None, typer.Option(help="Who asks for the erasure (kept in its receipt).")
    ] = None,
) -> None:
    """Remove everything of a user, for good, and print the erasure's receipt (JSON).

    Their chats, messages, tool calls, reasoning, runs, relayed events and summaries go;
    a tombstone keeps anything of theirs from being stored again. The receipt (counts
    per kind, when, by whom; no content) is kept in the store. A running server drops
    the runs it keeps of theirs within its retention (or: DELETE /api/admin/users/ID).
    """
    from threadstore.keys import user_uuid_for

    _check_store(db)
    user_uuid = user_uuid_for(user)
    if not yes and not typer.confirm(f"Remove everything of user {user} ({user_uuid}) for good?"):
        raise typer.Exit(1)

    async def work() -> str:
        async with _store(db) as store:
            receipt = await store.chats.forget_user(user_uuid, requested_by=by)
            return receipt.model_dump_json(indent=2)

    print(_run(work, db))


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
    force: Annotated[
        bool, typer.Option("--force", help="Replace the --output file if it exists.")
    ] = False,
) -> None:
    """Export chats as JSON lines: one chat, with its whole history, per line.

    An ``--output`` file appears whole or not at all: the export is written beside it
    and renamed over it once complete.
    """
    from threadstore.transfer import export_chat

    _check_store(db)
    if output is not None:
        _check_output(output, force=force)
    user_uuid = _user(user)

    async def work() -> int:
        async with _store(db) as store:
            if chats:
                selected = [await _resolve_chat(store, ref, user_uuid) for ref in chats]
            else:
                selected = list(await store.get_all_chats(user_uuid))
            with _sink(output) as sink, _progress(len(selected), "exporting") as advance:
                for chat in selected:
                    document = await export_chat(store, chat)
                    sink.write(document.model_dump_json() + "\n")
                    advance()
            return len(selected)

    try:
        count = _run(work, db)
    except OSError as exc:
        _fail(f"cannot write {output}: {exc.strerror or exc}", "nothing was written")
    err.print(f"[green]✓[/] exported {count} chat(s)" + (f" to {output}" if output else ""))


def _check_output(path: Path, *, force: bool) -> None:
    """Refuse an ``--output`` that is a folder, in a missing folder, or there without --force."""
    if path.is_dir():
        _fail(f"{path} is a folder", "give a file name, e.g. -o chats.jsonl")
    if not path.parent.is_dir():
        _fail(f"the folder {path.parent} does not exist", "create it, or choose another -o")
    if path.exists() and not force:
        _fail(f"{path} already exists", "pass --force to replace it")


@contextmanager
def _sink(output: Path | None) -> Iterator[IO[str]]:
    """Stdout, or a new file beside ``output`` that replaces it once written and synced."""
    if output is None:
        yield sys.stdout
        return
    handle = tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=output.parent, prefix=f".{output.name}.", delete=False
    )
    try:
        with handle:
            # A temporary file is private (0600); the export gets a new file's usual mode.
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(handle.name, 0o666 & ~umask)
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, output)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


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
    skip_invalid: Annotated[
        bool,
        typer.Option(
            help="Skip (and list) lines that are not valid chat exports, instead of stopping "
            "at the first one. Nothing of a skipped chat is stored."
        ),
    ] = False,
) -> None:
    """Import chats from JSON lines; each chat lands whole or not at all.

    Every line is checked as the server checks an import (names, ids, characters,
    nesting) before anything of it is stored, so an export from one backend either
    imports into another or names the line that cannot.
    """
    from threadstore.transfer import import_chat

    _check_store(db)
    user_uuid = _user(user)
    if str(source) == "-":
        text = sys.stdin.read()
    else:
        try:
            text = source.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            _fail(f"cannot read {source}: {exc}")
    # A byte order mark, as some editors write at the start of a UTF-8 file, is not data.
    lines = text.removeprefix("\ufeff").splitlines()
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    invalid: list[str] = []

    async def work() -> tuple[int, int]:
        imported = skipped = 0
        async with _store(db) as store:
            with _progress(len(numbered), "importing") as advance:
                for number, line in numbered:
                    advance()
                    try:
                        document = _import_document(line)
                        owner = user_uuid or document.chat.user_uuid
                        await import_chat(store, document, user_uuid=owner)
                        imported += 1
                    except ConflictError as exc:
                        if not skip_existing:
                            _fail(f"line {number}: {exc}")
                        skipped += 1
                    except InvalidInputError as exc:
                        if not skip_invalid:
                            _fail(f"line {number}: {exc}", "pass --skip-invalid to skip such lines")
                        invalid.append(f"line {number}: {exc}")
        return imported, skipped

    imported, skipped = _run(work, db)
    for reason in invalid:
        err.print(f"[yellow]skipped[/] {escape(reason)}", soft_wrap=True)
    note = f", skipped {skipped} already present" if skipped else ""
    note += f", skipped {len(invalid)} invalid" if invalid else ""
    out.print(f"[green]✓[/] imported {imported} chat(s){note}")


def _import_document(line: str) -> Any:
    """Parse and check one line of an export file; ``InvalidInputError`` says what is wrong."""
    from pydantic import ValidationError

    from threadstore.server import DEFAULT_LIMITS, check_id, check_json, check_name
    from threadstore.transfer import ChatExport

    try:
        document = ChatExport.model_validate_json(line)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InvalidInputError(
            f"not a chat export: {where + ': ' if where else ''}{first['msg']}"
        ) from None
    check_id("thread_id", document.chat.thread_id, DEFAULT_LIMITS)
    if document.chat.name:
        check_name(document.chat.name, DEFAULT_LIMITS)
    check_json("document", document, DEFAULT_LIMITS)
    return document


def main() -> None:
    """Entry point of the ``threadstore`` command."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
