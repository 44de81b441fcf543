"""What every command shares: the app, its options, the store opener and the error line."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar
from uuid import UUID

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from threadstore.errors import (
    ConfigurationError,
    MigrationError,
    ThreadstoreError,
)
from threadstore.keys import user_uuid_for
from threadstore.models import Chat
from threadstore.store import (
    Store,
    open_store,
)

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


def command_group(name: str, help: str) -> typer.Typer:
    """A ``threadstore NAME ...`` group of commands; bare, it prints its help."""
    group = typer.Typer(help=help, no_args_is_help=True)
    app.add_typer(group, name=name)
    return group


chats_app = command_group("chats", "List, show, rename and delete chats.")

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
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
MIN_PREFIX = 8
ChatArgument = Annotated[
    str,
    typer.Argument(
        help=f"Chat UUID, a unique prefix of one (at least {MIN_PREFIX} characters), or a "
        "thread id."
    ),
]


def fail(message: str, hint: str | None = None) -> NoReturn:
    # soft_wrap: one error is one line, however narrow the terminal or pipe.
    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    if hint:
        err.print(f"[dim]{escape(hint)}[/]", soft_wrap=True)
    raise typer.Exit(1)


DB_HINT = "check --db (or $THREADSTORE_DB): sqlite:///path.db, postgresql://user@host/db"


def run_work(work: Callable[[], Coroutine[Any, Any, T]], db: str) -> T:
    try:
        return asyncio.run(work())
    except MigrationError as exc:
        fail(str(exc), f"create or upgrade the schema with: threadstore migrate --db {db}")
    except ConfigurationError as exc:
        fail(str(exc), DB_HINT)
    except ThreadstoreError as exc:
        fail(str(exc))
    except sqlite3.Error as exc:
        fail(f"cannot use the SQLite database {db}: {exc}", DB_HINT)


def check_store(db: str, *, create: bool = False) -> None:
    """Check ``--db`` before anything else is printed, so a bad one is one error line.

    A command that reads needs the SQLite file to exist; one that creates it
    needs its folder. ``serve`` then also opens the store once (:func:`probe_store`),
    so a database it cannot reach never gets as far as the "serving on" banner.
    """
    if db.startswith("sqlite://"):
        from threadstore.store.sqlite import sqlite_path

        try:
            path = sqlite_path(db)
        except ThreadstoreError as exc:
            fail(str(exc), DB_HINT)
        if path != ":memory:":
            folder = Path(path).parent
            if create and not folder.is_dir():
                fail(f"the folder {folder} does not exist", "create it, or choose another --db")
            if not create and not Path(path).exists():
                fail(
                    f"no database at {path}",
                    f"start the server (threadstore serve --db {db}) "
                    f"or run: threadstore migrate --db {db}",
                )


def probe_store(db: str, *, create: bool) -> None:
    """Open (and with ``create``, migrate) the store once and close it again."""

    async def probe() -> None:
        store = await open_store(db, setup=create)
        await store.close()

    run_work(probe, db)


def with_store(db: str, use: Callable[[Store], Awaitable[T]]) -> T:
    """Open the store, run ``use`` on it and close it; a failure is one error line."""

    async def work() -> T:
        store = await open_store(db, setup=False)
        try:
            return await use(store)
        finally:
            await store.close()

    return run_work(work, db)


def user_of(user: str | None) -> UUID | None:
    return None if user is None else user_uuid_for(user)


async def resolve_chat(store: Store, ref: str, user: UUID | None) -> Chat:
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
        fail(f"no chat matches {ref!r}", hint)
    names = ", ".join(f"{c.chat_uuid} ({c.thread_id})" for c in candidates[:5])
    fail(f"{ref!r} matches {len(candidates)} chats: {names}", "use a longer prefix or --user")


ScopeUser = Annotated[
    str | None, typer.Option("--user", help="This user's (UUID or user id).", show_default=False)
]
ScopeChat = Annotated[
    str | None,
    typer.Option("--chat", help="This chat's (UUID, prefix or thread id).", show_default=False),
]


async def scope_of(store: Store, user: str | None, chat: str | None) -> dict[str, UUID | None]:
    """The ``user_uuid=`` or ``chat_uuid=`` a command for ``--user`` or ``--chat`` passes on."""
    if user is not None and chat is not None:
        fail("pass --user or --chat, not both")
    if chat is not None:
        return {"chat_uuid": (await resolve_chat(store, chat, None)).chat_uuid}
    return {"user_uuid": user_of(user)}


def scope_label(user: str | None, chat: str | None) -> str:
    """How a message names the scope of ``--user``/``--chat``."""
    return f"chat {chat}" if chat else f"user {user}" if user else "every chat"


def shorten(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def when(chat: Chat) -> str:
    return chat.updated_at.astimezone().strftime("%Y-%m-%d %H:%M")


@contextmanager
def progress_bar(total: int | None, label: str) -> Iterator[Callable[[], None]]:
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
