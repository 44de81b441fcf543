"""``threadstore export`` and ``threadstore import``: move chats as JSON Lines."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Annotated, Any

import typer
from rich.markup import escape

from threadstore.cli._common import (
    DEFAULT_DB,
    DbOption,
    UserOption,
    app,
    check_store,
    err,
    fail,
    out,
    progress_bar,
    resolve_chat,
    user_of,
    with_store,
)
from threadstore.errors import (
    ConflictError,
    InvalidInputError,
)
from threadstore.store import Store


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

    check_store(db)
    if output is not None:
        _check_output(output, force=force)
    user_uuid = user_of(user)

    async def work(store: Store) -> int:
        if chats:
            selected = [await resolve_chat(store, ref, user_uuid) for ref in chats]
        else:
            selected = list(await store.get_all_chats(user_uuid))
        with _sink(output) as sink, progress_bar(len(selected), "exporting") as advance:
            for chat in selected:
                document = await export_chat(store, chat)
                sink.write(document.model_dump_json() + "\n")
                advance()
        return len(selected)

    try:
        count = with_store(db, work)
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}", "nothing was written")
    err.print(f"[green]✓[/] exported {count} chat(s)" + (f" to {output}" if output else ""))


def _check_output(path: Path, *, force: bool) -> None:
    """Refuse an ``--output`` that is a folder, in a missing folder, or there without --force."""
    if path.is_dir():
        fail(f"{path} is a folder", "give a file name, e.g. -o chats.jsonl")
    if not path.parent.is_dir():
        fail(f"the folder {path.parent} does not exist", "create it, or choose another -o")
    if path.exists() and not force:
        fail(f"{path} already exists", "pass --force to replace it")


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

    check_store(db)
    user_uuid = user_of(user)
    if str(source) == "-":
        text = sys.stdin.read()
    else:
        try:
            text = source.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"cannot read {source}: {exc}")
    # A byte order mark, as some editors write at the start of a UTF-8 file, is not data.
    lines = text.removeprefix("\ufeff").splitlines()
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    invalid: list[str] = []

    async def work(store: Store) -> tuple[int, int]:
        imported = skipped = 0
        with progress_bar(len(numbered), "importing") as advance:
            for number, line in numbered:
                advance()
                try:
                    document = _import_document(line)
                    owner = user_uuid or document.chat.user_uuid
                    await import_chat(store, document, user_uuid=owner)
                    imported += 1
                except ConflictError as exc:
                    if not skip_existing:
                        fail(f"line {number}: {exc}")
                    skipped += 1
                except InvalidInputError as exc:
                    if not skip_invalid:
                        fail(f"line {number}: {exc}", "pass --skip-invalid to skip such lines")
                    invalid.append(f"line {number}: {exc}")
        return imported, skipped

    imported, skipped = with_store(db, work)
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
