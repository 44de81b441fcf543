"""``serve``, ``migrate`` and ``sweep``: run the server and keep its database in shape."""

from __future__ import annotations

import gc
import ipaddress
import json
import os
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from threadstore.errors import (
    MigrationError,
    ThreadstoreError,
)
from threadstore.models import (
    SweepReport,
    utcnow,
)
from threadstore.store import (
    SWEEP_BATCH,
    Store,
)

if TYPE_CHECKING:
    from threadstore.server import Authenticator
from threadstore.cli._common import (
    CORS_ENV_VAR,
    DEFAULT_DB,
    STORE_TIMEOUT_ENV_VAR,
    DbOption,
    app,
    check_store,
    err,
    fail,
    out,
    probe_store,
    with_store,
)


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
    outbox: Annotated[
        Path | None,
        typer.Option(
            help="A local journal file where runs' writes wait while the store is away: their "
            "clients get RUN_FINISHED once journaled, and the file drains into the store when "
            "it answers again (also at the next start). One server process per file. Off by "
            "default: a run whose store stays away ends with RUN_ERROR STORE_UNAVAILABLE.",
            show_default=False,
        ),
    ] = None,
    outbox_max_bytes: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Bytes of writes the --outbox file may hold; past that new runs get 503 "
            "(default: 268435456, 256 MiB).",
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
        fail(
            f"--workers {workers} needs PostgreSQL: on {db.partition(':')[0]} a run can only be"
            " resumed and cancelled by the process running it; use --workers 1 or a"
            " postgresql:// --db"
        )
    if workers > 1 and outbox is not None:
        fail(
            f"--outbox takes one server process (--workers {workers}): each process needs a "
            "journal file of its own; run the processes separately, each with its --outbox"
        )
    if outbox_max_bytes is not None and outbox is None:
        fail("--outbox-max-bytes bounds the --outbox file: give --outbox PATH too")
    authenticator, auth_line = _authenticator(auth, tokens_file, trust_user_header)
    check_store(db, create=migrate)
    probe_store(db, create=migrate)
    options: dict[str, Any] = {
        "auth": [auth, None if tokens_file is None else str(tokens_file), trust_user_header],
        "compaction": [compact_after, compact_keep],
        "store": db,
        "agent": agent,
        "model": model,
        "demo_delay": demo_delay,
        "cors_origins": cors_origin or [],
        "admins": admin or [],
        "store_timeout": store_timeout,
        "retention_interval": retention_interval,
        "outbox": None if outbox is None else str(outbox),
    }
    if outbox_max_bytes is not None:
        options["outbox_max_bytes"] = outbox_max_bytes
    if compact_after is not None and compact_after <= compact_keep:
        fail(
            f"--compact-after {compact_after} must be more than --compact-keep {compact_keep}:"
            " every compaction must leave the agent fewer messages"
        )
    try:
        # Built here even for workers, so a bad option is one error line before the
        # banner; each worker then builds its own app (its own store, manager and relay),
        # the schema migrated above, once.
        server_app = _serve_app(options, migrate=migrate)
    except ThreadstoreError as exc:
        fail(str(exc))
    base = f"http://{host}:{port}"
    bearer = " -H 'Authorization: Bearer <token>'" if auth_line.startswith("tokens") else ""
    try_it = (
        f"curl -N {base}/agui -H 'Content-Type: application/json'{bearer} -d "
        """'{"threadId":"t1","runId":"r1","messages":[{"id":"m1","role":"user","""
        """"content":"What is 12 * 7 + 3?"}]}'"""
    )
    err.print(f"[bold]threadstore[/] serving the [cyan]{escape(agent)}[/] agent on {base}")
    lines = [("database", db), ("auth", auth_line)]
    if outbox is not None:
        lines.append(("outbox", str(outbox)))
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
    else:
        err.print(f"  {'workers':<9} {workers} processes", soft_wrap=True)
        os.environ[_WORKER_OPTIONS_ENV] = json.dumps(options)
    uvicorn.run(
        server_app if workers == 1 else "threadstore.cli:worker_app",
        factory=workers > 1,
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
    from threadstore.lifecycle import CompactionPolicy
    from threadstore.server import create_app

    kwargs = dict(options)
    auth, tokens_file, trust_user_header = kwargs.pop("auth")
    tokens = None if tokens_file is None else Path(tokens_file)
    authenticator, _ = _authenticator(auth, tokens, trust_user_header)
    after, keep = kwargs.pop("compaction")
    policy = None if after is None else CompactionPolicy(max_messages=after, keep_messages=keep)
    return create_app(**kwargs, auth=authenticator, compaction=policy, migrate=migrate)


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
        fail(f"--auth must be 'none' or 'tokens', got {auth!r}")
    if auth == "none" and (tokens_file or tokens_env):
        source = "--tokens-file" if tokens_file else f"${TOKENS_ENV_VAR}"
        fail(
            f"{source} gives API tokens but --auth none turns auth off",
            f"drop --auth none to require the tokens, or remove {source}",
        )
    mode = auth or ("tokens" if tokens_file or tokens_env else "none")
    try:
        if mode == "tokens":
            if trust_user_header:
                fail("choose either token auth or --trust-user-header, not both")
            tokens = TokenAuth.from_file(tokens_file) if tokens_file else TokenAuth.from_env()
            source = str(tokens_file) if tokens_file else f"${TOKENS_ENV_VAR}"
            users = len(set(tokens.tokens.values()))
            return tokens, f"tokens ({users} user(s) from {source}; send Authorization: Bearer)"
    except ThreadstoreError as exc:
        fail(str(exc))
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
    check_store(db, create=True)

    async def work(store: Store) -> tuple[int | None, int | None]:
        before = await _schema_version(store)
        await store.setup()
        return before, await _schema_version(store)

    before, after = with_store(db, work)
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

    check_store(db)

    def no_agent() -> Any:
        raise RuntimeError("sweep starts no runs")

    async def work(store: Store) -> tuple[int, int, SweepReport]:
        manager = DistributedRunManager(no_agent, store=store, event_retention=event_retention)
        async with manager:
            swept = await manager.sweep(stale_after)
        cutoff = utcnow() - timedelta(seconds=deleted_retention)
        purged = await store.chats.purge_deleted_chats(older_than=cutoff)
        store.deleted_retention = timedelta(seconds=deleted_retention)
        return swept, purged, await store.chats.sweep_expired(batch=batch)

    swept, purged, report = with_store(db, work)
    out.print(f"[green]✓[/] finalized {swept} stale run(s)")
    out.print(f"[green]✓[/] purged {purged} soft-deleted chat(s)")
    reasons = ", ".join(f"{n} {why}" for why, n in sorted(report.reasons.items())) or "none"
    out.print(
        f"[green]✓[/] retention: deleted {report.chats} chat(s) ({reasons}),"
        f" {report.messages} message(s), {report.run_events} run event(s)",
        soft_wrap=True,
    )
